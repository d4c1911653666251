"""`continuity runners add|tenants|list|remove` against a real NATS and Redis and the
session-store, as an operator runs them (no authorization here: tests/deploy covers the shipped
one): what each prints, what it records, the decisions consumers the session-store makes and
deletes, and what it leaves alone when it cannot finish."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, DeliverPolicy
from nats.js.errors import NotFoundError

from continuity.cli.runner_files import ACCOUNTS_FILE, IMPORTS_FILE
from services import registry
from shared.contract import subjects
from shared.platform.config import Config
from tests.support import running

pytestmark = pytest.mark.asyncio
SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "nats"


async def cli(config: Config, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "continuity", "runners", *args, "--nats-url", config.nats_url]
    return await asyncio.to_thread(
        subprocess.run, cmd, input=(stdin or b"").decode(), capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    conf = tmp_path / "nats"
    conf.mkdir()
    for name in (ACCOUNTS_FILE, IMPORTS_FILE):
        shutil.copy(SHIPPED / name, conf / name)
    return conf


def new_runner() -> str:
    return f"r-{uuid.uuid4().hex[:10]}"


def listed(out: str, runner_id: str) -> dict[str, object]:
    item: dict[str, object] = next(r for r in json.loads(out)["items"] if r["runner_id"] == runner_id)
    return item


async def test_a_runner_issued_while_no_session_store_answers_is_recorded_later(
    config: Config, conf_dir: Path, tmp_path: Path
) -> None:
    runner = new_runner()
    seed = tmp_path / f"{runner}.nk"
    issued = await cli(
        config, "add", runner, "--tenant", "acme", "--seed-file", str(seed), "--conf-dir", str(conf_dir)
    )
    assert issued.returncode == 4, issued.stderr
    assert "[tenants_not_recorded]" in issued.stderr
    assert "no session-store service is answering continuity.runners.put" in issued.stderr
    assert f"`continuity runners tenants {runner} --tenant acme`" in issued.stderr
    assert "runner_not_registered" in issued.stderr
    assert seed.exists() and f"RUNNER_{runner}: {{" in (conf_dir / ACCOUNTS_FILE).read_text()

    async with running(registry.load("session-store"), config):
        unrecorded = await cli(config, "list", "--conf-dir", str(conf_dir), "--json")
        assert unrecorded.returncode == 0, unrecorded.stderr
        row = listed(unrecorded.stdout, runner)
        assert (row["status"], row["tenants"], row["in_conf"], row["consumer"]) == (
            "unrecorded",
            [],
            True,
            False,
        )
        recorded = await cli(
            config, "tenants", runner, "--tenant", "globex,acme", "--tenant", "acme", "--actor", "alice"
        )
        assert recorded.returncode == 0, recorded.stderr
        assert '["acme","globex"]' in recorded.stdout and "alice" in recorded.stdout
        active = await cli(config, "list", "--conf-dir", str(conf_dir), "--json")
        assert listed(active.stdout, runner)["status"] == "active"


async def test_add_records_the_tenants_and_remove_revokes(
    config: Config, conf_dir: Path, tmp_path: Path
) -> None:
    runner, other = new_runner(), new_runner()
    async with running(registry.load("session-store"), config):
        issued = await cli(
            config,
            "add",
            runner,
            "--tenant",
            "acme",
            "--tenant",
            "globex",
            "--seed-file",
            str(tmp_path / "a.nk"),
            "--json",
        )
        assert issued.returncode == 0, issued.stderr
        out = json.loads(issued.stdout)  # one document: the identity and the directory's record
        assert (out["directory"]["tenants"], out["directory"]["status"]) == (["acme", "globex"], "active")
        assert out["seed_file"] == str(tmp_path / "a.nk") and "error" not in out
        printed = await cli(
            config,
            "add",
            other,
            "--tenant",
            "acme",
            "--seed-file",
            str(tmp_path / "b.nk"),
            "--conf-dir",
            str(conf_dir),
        )
        assert printed.returncode == 0, printed.stderr
        assert f"# runner directory: {other} issued for acme" in printed.stdout
        assert "# then restart the NATS servers one at a time" in printed.stdout

        table = await cli(config, "list")
        assert table.returncode == 0, table.stderr
        assert any(
            line.split() == [runner, "acme,globex", "active", "-", "no"] for line in table.stdout.splitlines()
        )

        # A conf file not as written stops the removal before anything changes.
        accounts = conf_dir / ACCOUNTS_FILE
        good = accounts.read_text()
        accounts.write_text(good.replace(f"RUNNER_{other}: {{", f"RUNNER_{other}:{{"))
        stopped = await cli(config, "remove", other, "--conf-dir", str(conf_dir), "--yes")
        assert stopped.returncode == 2 and "[invalid_file]" in stopped.stderr
        assert listed((await cli(config, "list", "--json")).stdout, other)["status"] == "active"
        accounts.write_text(good)

        removed = await cli(config, "remove", runner, "--yes", "--actor", "alice")
        assert removed.returncode == 0, removed.stderr
        assert (
            f"Remove its blocks from {ACCOUNTS_FILE} (`RUNNER_{runner}`) and {IMPORTS_FILE}" in removed.stdout
        )
        assert "restart the NATS servers one at a time" in removed.stdout
        row = listed((await cli(config, "list", "--json")).stdout, runner)
        assert (row["status"], row["actor"]) == ("revoked", "alice")
        # Issued again: active, with the tenants given now.
        again = await cli(config, "tenants", runner, "--tenant", "acme", "--json")
        assert (json.loads(again.stdout)["status"], json.loads(again.stdout)["tenants"]) == (
            "active",
            ["acme"],
        )

    # Without the session-store nothing is revoked, so nothing else is changed either.
    before = accounts.read_text()
    unreachable = await cli(config, "remove", other, "--conf-dir", str(conf_dir), "--yes")
    assert unreachable.returncode == 4 and "no session-store service is answering" in unreachable.stderr
    assert accounts.read_text() == before and f"RUNNER_{other}: {{" in before


async def test_the_session_store_creates_and_deletes_a_runners_decisions_consumer(
    config: Config, tmp_path: Path, nc: Client
) -> None:
    """`--create-consumer`, `--consumer-only` and `remove` ask the session-store, which makes the
    consumer with its own configuration, for an issued runner only."""
    runner = new_runner()
    js = nc.jetstream()
    async with running(registry.load("session-store"), config):
        unissued = await cli(config, "add", runner, "--consumer-only")
        assert unissued.returncode == 1 and "[consumer_not_created]" in unissued.stderr
        assert f"record its tenants first with `continuity runners tenants {runner}" in unissued.stderr
        with pytest.raises(NotFoundError):
            await js.consumer_info(subjects.DECISIONS_STREAM, runner)

        issued = await cli(
            config,
            "add",
            runner,
            "--tenant",
            "acme",
            "--seed-file",
            str(tmp_path / "r.nk"),
            "--create-consumer",
        )
        assert issued.returncode == 0, issued.stderr
        assert f"# the session-store created consumer {runner} on CONTINUITY_DECISIONS" in issued.stderr
        made = (await js.consumer_info(subjects.DECISIONS_STREAM, runner)).config
        assert (made.durable_name, made.filter_subject) == (runner, subjects.decisions(runner))
        assert (made.ack_policy, made.deliver_policy, made.max_deliver) == (
            AckPolicy.EXPLICIT,
            DeliverPolicy.ALL,
            -1,
        )
        assert made.deliver_subject is None  # a pull consumer
        again = await cli(config, "add", runner, "--consumer-only")
        assert again.returncode == 0, again.stderr
        assert listed((await cli(config, "list", "--json")).stdout, runner)["consumer"] is True

        removed = await cli(config, "remove", runner, "--yes", "--json")
        assert removed.returncode == 0, removed.stderr
        assert json.loads(removed.stdout)["consumer"] == "deleted"
        with pytest.raises(NotFoundError):
            await js.consumer_info(subjects.DECISIONS_STREAM, runner)
        revoked = await cli(config, "add", runner, "--consumer-only")
        assert revoked.returncode == 1 and "[consumer_not_created]" in revoked.stderr
        twice = await cli(config, "remove", runner, "--yes", "--json")
        assert json.loads(twice.stdout)["consumer"] == "absent"
