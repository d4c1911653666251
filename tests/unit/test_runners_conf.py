"""`continuity runners add|remove` on the conf files, and their argument checks: what they
write and remove, and what they refuse before anything changes (no server needed; the deploy
tests start nats-server on the files these functions write)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from continuity.cli import arguments, exits
from continuity.cli import main as cli
from continuity.cli.runner_accounts import new_identity
from continuity.cli.runner_files import (
    ACCOUNTS_FILE,
    IMPORTS_FILE,
    add_to_conf_dir,
    planned_removal,
    replace,
    runners_in_conf,
)
from shared.contract.tenancy import MAX_TENANTS

SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "nats"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    for name in (ACCOUNTS_FILE, IMPORTS_FILE):
        shutil.copy(SHIPPED / name, tmp_path / name)
    for runner in ("r-1", "r-1-b", "r-2"):
        add_to_conf_dir(tmp_path, new_identity(runner))
    return tmp_path


def apply(conf_dir: Path, runner_id: str) -> None:
    for path, text in planned_removal(conf_dir, runner_id).items():
        path.write_text(text)


@pytest.mark.parametrize("removed", ["r-1", "r-1-b", "r-2"])
def test_removing_a_runner_takes_out_its_blocks_and_nothing_else(conf_dir: Path, removed: str) -> None:
    apply(conf_dir, removed)
    kept = {"r-1", "r-1-b", "r-2"} - {removed}
    assert runners_in_conf(conf_dir) == kept
    accounts, imports = ((conf_dir / n).read_text() for n in (ACCOUNTS_FILE, IMPORTS_FILE))
    assert f"# runner {removed}\n" not in accounts and f"RUNNER_{removed}," not in imports
    for runner in kept:  # a name that begins like another's stays
        assert f"# runner {runner}\nRUNNER_{runner}: {{" in accounts and f"RUNNER_{runner}," in imports
    assert "\n\n\n" not in accounts and accounts.endswith("}\n")
    assert imports.rstrip().endswith("]")
    assert planned_removal(conf_dir, removed) == {}  # removed once: nothing left to remove
    # Removing the others too gives back the shipped files: nothing of the runners is left.
    for runner in sorted(kept):
        apply(conf_dir, runner)
    assert runners_in_conf(conf_dir) == set()
    assert (conf_dir / IMPORTS_FILE).read_text() == (SHIPPED / IMPORTS_FILE).read_text()
    assert (conf_dir / ACCOUNTS_FILE).read_text().rstrip() == (SHIPPED / ACCOUNTS_FILE).read_text().rstrip()


def test_the_files_are_replaced_whole_and_keep_their_mode(conf_dir: Path) -> None:
    for name in (ACCOUNTS_FILE, IMPORTS_FILE):
        (conf_dir / name).chmod(0o640)
    add_to_conf_dir(conf_dir, new_identity("r-3"))
    for path, text in planned_removal(conf_dir, "r-1").items():
        replace(path, text)
    assert runners_in_conf(conf_dir) == {"r-1-b", "r-2", "r-3"}
    for name in (ACCOUNTS_FILE, IMPORTS_FILE):
        assert (conf_dir / name).stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in conf_dir.iterdir()) == sorted((ACCOUNTS_FILE, IMPORTS_FILE))  # no leftovers


def test_a_hand_edited_account_stops_the_removal_before_anything_changes(conf_dir: Path) -> None:
    accounts = conf_dir / ACCOUNTS_FILE
    accounts.write_text(accounts.read_text().replace("RUNNER_r-2: {", "RUNNER_r-2:{"))
    with pytest.raises(exits.Failure) as failed:
        planned_removal(conf_dir, "r-2")
    assert failed.value.code == "invalid_file" and "remove it by hand" in failed.value.message
    text = accounts.read_text().replace("RUNNER_r-2:{", "RUNNER_r-2: {")
    accounts.write_text(text[: text.rindex("}")])  # the last block (r-2's) never closed
    with pytest.raises(exits.Failure) as unclosed:
        planned_removal(conf_dir, "r-2")
    assert unclosed.value.code == "invalid_file"


def test_runners_add_needs_a_seed_file_and_tenants(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seed = tmp_path / "r.nk"
    code, _, err = run(["runners", "add", "r-1", "--seed-file", str(seed)], capsys)
    assert code == 2 and "--tenant is required (or --consumer-only)" in err and not seed.exists()
    code, out, _ = run(["runners", "add", "r-1", "--json"], capsys)
    assert code == 2 and '"invalid_argument"' in out and "--seed-file and --tenant are required" in out
    many = ",".join(f"t{i}" for i in range(MAX_TENANTS + 1))
    code, _, err = run(["runners", "add", "r-1", "--seed-file", str(seed), "--tenant", many], capsys)
    assert code == 2 and f"at most {MAX_TENANTS} tenants" in err and not seed.exists()


def test_runners_add_never_overwrites_a_seed_or_a_runner(
    capsys: pytest.CaptureFixture[str], conf_dir: Path, tmp_path: Path
) -> None:
    seed = tmp_path / "kept.nk"
    seed.write_text("not to be lost\n")
    before = (conf_dir / ACCOUNTS_FILE).read_text()
    args = [
        "runners",
        "add",
        "r-9",
        "--tenant",
        "acme",
        "--seed-file",
        str(seed),
        "--conf-dir",
        str(conf_dir),
    ]
    code, _, err = run(args, capsys)
    assert code == 1 and "[seed_exists]" in err
    assert seed.read_text() == "not to be lost\n" and (conf_dir / ACCOUNTS_FILE).read_text() == before
    args = [
        "runners",
        "add",
        "r-1",
        "--tenant",
        "acme",
        "--seed-file",
        str(tmp_path / "new.nk"),
        "--conf-dir",
        str(conf_dir),
    ]
    code, _, err = run(args, capsys)
    assert code == 1 and "[runner_exists]" in err and not (tmp_path / "new.nk").exists()


@pytest.mark.parametrize("tenant", ["acme,", "acme,,globex", "acme corp", ""])
def test_tenant_lists_are_checked_by_the_parser(capsys: pytest.CaptureFixture[str], tenant: str) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["runners", "tenants", "r-1", "--tenant", tenant])
    assert exited.value.code == 2 and "--tenant" in capsys.readouterr().err


def test_runners_remove_asks_first_and_changes_nothing_unconfirmed(
    capsys: pytest.CaptureFixture[str], conf_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    before = (conf_dir / ACCOUNTS_FILE).read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    code, _, err = run(["runners", "remove", "r-1", "--conf-dir", str(conf_dir)], capsys)
    assert code == 1 and "Remove runner r-1: revoke it" in err and "[not_confirmed]" in err
    assert (conf_dir / ACCOUNTS_FILE).read_text() == before


def test_runner_ids_are_subject_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("r.1", "r:1", "r*", ">", "x" * 65):
        with pytest.raises(SystemExit):
            cli.main(["runners", "remove", bad, "--yes"])
        assert "RUNNER_ID must be" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["sessions", "transfer", "acme", "c-1", "codex", "--to", "a.b"])
    assert "RUNNER_ID must be" in capsys.readouterr().err


def test_the_actor_defaults_to_the_login_name_when_it_is_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "alice")
    assert arguments.default_actor() == "alice"
    monkeypatch.setenv("LOGNAME", "alice smith")  # not a token: the audit records `operator`
    assert arguments.default_actor() == "operator"


def test_the_shipped_imports_file_is_the_one_the_command_starts_from() -> None:
    from continuity.cli.runner_files import EMPTY_IMPORTS

    assert (SHIPPED / IMPORTS_FILE).read_text() == EMPTY_IMPORTS
