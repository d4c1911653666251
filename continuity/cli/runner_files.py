"""The NATS servers' conf files of runners: `runners.conf` (each runner's account) and
`runner-imports.conf` (CONTINUITY's import of each runner's archive subject), edited in place by
`continuity runners add|remove`. A file is replaced whole, and one not as these functions write
it is refused before anything changes.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from continuity.cli import exits
from continuity.cli.runner_accounts import Identity, account_block, import_entry

ACCOUNTS_FILE = "runners.conf"
IMPORTS_FILE = "runner-imports.conf"

EMPTY_IMPORTS = (
    "# Maintained by `continuity runners add` and `continuity runners remove`: each runner's\n"
    "# archive subject.\nimports: [\n]\n"
)


def _conf_files(conf_dir: Path) -> tuple[Path, Path]:
    return conf_dir / ACCOUNTS_FILE, conf_dir / IMPORTS_FILE


def _account_line(runner_id: str) -> re.Pattern[str]:
    return re.compile(rf"^RUNNER_{re.escape(runner_id)}:", re.MULTILINE)


def _import_line(runner_id: str) -> re.Pattern[str]:
    # The comma ends the account's name: RUNNER_a does not match RUNNER_a-1's line.
    return re.compile(rf"account: RUNNER_{re.escape(runner_id)},")


def runners_in_conf(conf_dir: Path) -> set[str]:
    """The runner_ids that have an account in runners.conf."""
    accounts, _ = _conf_files(conf_dir)
    text = accounts.read_text() if accounts.exists() else ""
    return set(re.findall(r"^RUNNER_([A-Za-z0-9_-]{1,64}):", text, re.MULTILINE))


def check_conf_dir(conf_dir: Path, runner_id: str) -> None:
    """Refuse, before anything is written, a runner already there or a file not as written."""
    accounts, imports = _conf_files(conf_dir)
    if accounts.exists() and _account_line(runner_id).search(accounts.read_text()):
        raise exits.Failure(
            exits.EXIT_CONFLICT, "runner_exists", f"{accounts} already has runner {runner_id}"
        )
    if imports.exists() and not imports.read_text().rstrip().endswith("]"):
        raise exits.Failure(
            exits.EXIT_BAD_INPUT, "invalid_file", f"{imports} does not end with the imports list's `]`"
        )


def replace(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all: a server restarting meanwhile reads either."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_to_conf_dir(conf_dir: Path, identity: Identity) -> None:
    """Append the runner's account to runners.conf and its archive import to
    runner-imports.conf (after `check_conf_dir`)."""
    accounts, imports = _conf_files(conf_dir)
    accounts_text = accounts.read_text() if accounts.exists() else ""
    body = (imports.read_text() if imports.exists() else EMPTY_IMPORTS).rstrip()
    replace(imports, body[:-1].rstrip("\n") + "\n" + import_entry(identity.runner_id) + "]\n")
    separator = "\n" if accounts_text and not accounts_text.endswith("\n\n") else ""
    replace(accounts, accounts_text + separator + account_block(identity.runner_id, identity.public_key))


def _without_account(text: str, runner_id: str, path: Path) -> str | None:
    """runners.conf without the runner's block (its `# runner` comment, `RUNNER_<id>: {` up to
    the next `}` in the first column), or None when it has none."""
    lines = text.splitlines(keepends=True)
    head = f"RUNNER_{runner_id}: {{"
    starts = [i for i, line in enumerate(lines) if line.rstrip() == head]
    if not starts:
        if _account_line(runner_id).search(text):
            raise exits.Failure(
                exits.EXIT_BAD_INPUT,
                "invalid_file",
                f"{path}: runner {runner_id}'s account is not as `continuity runners add` writes it; "
                "remove it by hand",
            )
        return None
    start = starts[0]
    end = next((j for j in range(start + 1, len(lines)) if lines[j].rstrip() == "}"), None)
    if end is None:
        raise exits.Failure(
            exits.EXIT_BAD_INPUT,
            "invalid_file",
            f"{path}: runner {runner_id}'s account has no closing `}}`",
        )
    if start > 0 and lines[start - 1].strip() == f"# runner {runner_id}":
        start -= 1
    kept = lines[:start] + lines[end + 1 :]
    # The blank line that separated the block goes with it.
    if start > 0 and kept[start - 1].strip() == "" and (start == len(kept) or kept[start].strip() == ""):
        del kept[start - 1]
    return "".join(kept)


def _without_import(text: str, runner_id: str) -> str | None:
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if not _import_line(runner_id).search(line)]
    return "".join(kept) if len(kept) != len(lines) else None


def planned_removal(conf_dir: Path, runner_id: str) -> dict[Path, str]:
    """The files to rewrite without the runner (nothing when it is in neither), computed before
    anything changes so that a file not as written stops the command early."""
    accounts, imports = _conf_files(conf_dir)
    changes: dict[Path, str] = {}
    if accounts.exists():
        text = _without_account(accounts.read_text(), runner_id, accounts)
        if text is not None:
            changes[accounts] = text
    if imports.exists():
        text = _without_import(imports.read_text(), runner_id)
        if text is not None:
            changes[imports] = text
    return changes
