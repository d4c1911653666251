"""The operator CLI, run as a separate process (`continuity reconciliations|runs ...`) against
running services: tables, `--json`, error messages and exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client

from continuity.devstack.servers import free_port
from services import registry
from shared.contract.client import ContinuityClient
from tests.support import make_config, running
from tests.support.reconciliation import classify, new_run, seed_reconcile

pytestmark = pytest.mark.asyncio

CLI = str(Path(sys.executable).parent / "continuity")


@pytest.fixture(scope="module")
async def services(nats_server: Any, redis_server: Any) -> AsyncIterator[str]:
    config = make_config(nats_server.url, redis_server.url)
    async with (
        running(registry.load("session-store"), config),
        running(
            registry.load("reconciliation", gauge_interval_s=0.5, outbox_grace_s=1.0, sweep_interval_s=0.2),
            config,
        ),
    ):
        yield nats_server.url


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err

    def json(self) -> Any:
        return json.loads(self.out)


async def cli(nats_url: str, *args: str, stdin: bytes | None = None) -> Result:
    """Run the CLI with NATS_URL in its environment, without blocking the services' loop."""
    proc = await asyncio.create_subprocess_exec(
        CLI,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NATS_URL": nats_url},
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 30)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


async def test_list_show_resolve_and_the_run_with_its_audit_trail(
    services: str, nc: Client, redis_client: aioredis.Redis, client: ContinuityClient
) -> None:
    run = await seed_reconcile(redis_client, nc.jetstream(), client, recorded="completed")
    rid = run.run_id

    listed, table, shown = await asyncio.gather(
        cli(services, "reconciliations", "list", "--limit", "1000", "--json"),
        cli(services, "reconciliations", "list", "--limit", "1000"),
        cli(services, "reconciliations", "show", rid),
    )
    assert listed.code == 0, listed.err
    assert rid in [item["run_id"] for item in listed.json()["items"]]
    assert all(item["status"] == "open" for item in listed.json()["items"])
    assert table.code == 0 and table.out.startswith("RUN ID") and rid in table.out
    assert shown.code == 0
    assert "paperclip_call_assigned_tool" in shown.out and "Runner's outcome  completed" in shown.out
    assert f"continuity reconciliations resolve {rid}" in shown.out

    retried = await cli(services, "runs", "retry", rid, "--actor", "ops", "--json")
    assert retried.code == 1 and retried.json()["error"]["code"] == "reconciliation_required"
    assert "waits on a reconciliation" in retried.err

    resolved = await cli(
        services,
        *("reconciliations", "resolve", rid, "--outcome", "completed"),
        *("--evidence-file", "-", "--actor", "alice", "--json"),
        stdin=b"order 1234 is in the ledger\n",
    )
    assert resolved.code == 0, resolved.err
    assert resolved.json() == {"status": "delivered", "decision_id": f"{rid}:1:continue_fresh"}

    again, other = await asyncio.gather(
        cli(
            services,
            "reconciliations",
            "resolve",
            rid,
            "--outcome",
            "completed",
            "--evidence",
            "x",
            "--actor",
            "bob",
        ),
        cli(
            services,
            *("reconciliations", "resolve", rid, "--outcome", "mixed", "--evidence", "x", "--actor", "bob"),
            "--json",
        ),
    )
    assert again.code == 1 and "already resolved with this outcome" in again.err
    assert "execution_reconciliation_already_delivered" in again.err
    assert other.code == 1
    error = other.json()["error"]
    assert (error["status"], error["code"]) == (409, "execution_reconciliation_conflict")
    assert "another outcome" in error["message"]

    as_json, as_table, record = await asyncio.gather(
        cli(services, "runs", "show", rid, "--json"),
        cli(services, "runs", "show", rid),
        cli(services, "reconciliations", "show", rid, "--json"),
    )
    assert as_json.code == 0 and as_json.json()["run"]["status"] == "continued"
    assert as_json.json()["run"]["last_decision"]["reconciled_outcome"] == "completed"
    assert [(e["kind"], e["actor"]) for e in as_json.json()["audit"]] == [
        ("decision", "classifier"),
        ("reconciliation_opened", "reconciliation"),
        ("operator_resolve", "alice"),
    ]
    assert as_table.code == 0 and "Audit trail" in as_table.out
    assert "operator_resolve" in as_table.out and "alice" in as_table.out
    assert record.json()["resolution"]["evidence"] == "order 1234 is in the ledger"


async def test_runs_retry_of_a_run_stopped_for_an_operator(
    services: str, nc: Client, redis_client: aioredis.Redis
) -> None:
    run = new_run()
    await classify(redis_client, nc.jetstream(), run, "operator")
    first = await cli(services, "runs", "retry", run.run_id, "--actor", "dana")
    assert first.code == 0, first.err
    assert f"decision {run.run_id}:1:continue_fresh" in first.out
    second = await cli(services, "runs", "retry", run.run_id, "--actor", "dana", "--json")
    assert second.code == 1 and second.json()["error"]["code"] == "operator_retry_already_delivered"

    stopped = new_run()
    await classify(redis_client, nc.jetstream(), stopped, "retry_same_session")
    running_run = await cli(services, "runs", "retry", stopped.run_id, "--actor", "dana")
    assert running_run.code == 1 and "not stopped for an operator" in running_run.err


async def test_errors_have_clear_messages_and_exit_codes(services: str) -> None:
    closed = f"nats://127.0.0.1:{free_port()}"
    missing, missing_run, bad_id, long_evidence, no_nats, bad_limit = await asyncio.gather(
        cli(services, "reconciliations", "show", "run-never-seen", "--json"),
        cli(services, "runs", "show", "run-never-seen"),
        cli(services, "reconciliations", "show", "not a token"),
        cli(
            services,
            *("reconciliations", "resolve", "run-x", "--outcome", "completed"),
            *("--evidence", "x" * 2001, "--actor", "a"),
        ),
        cli(services, "reconciliations", "list", "--nats-url", closed),
        cli(services, "reconciliations", "list", "--limit", "0"),
    )
    assert missing.code == 3 and missing.json()["error"]["code"] == "not_found"
    assert "run run-never-seen is not known here" in missing.err
    assert missing_run.code == 3 and "not_found" in missing_run.err
    assert bad_id.code == 2 and "RUN_ID" in bad_id.err
    assert long_evidence.code == 2 and "at most 2000" in long_evidence.err
    assert no_nats.code == 4 and "cannot connect to NATS" in no_nats.err
    assert bad_limit.code == 2
