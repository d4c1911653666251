"""The records' Lua scripts, each declared once with the KEYS it takes, in the order its header
states; `shared.records.store.RunStore` runs them, one method each.

A new atomic step is one `.lua` file here, one declaration below and one `RunStore` method.
"""

from __future__ import annotations

from importlib import resources
from typing import get_args

from shared.contract.types import RunStatus
from shared.platform.redis import Script
from shared.records import keys

RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
"""The runs index's per-status sets, in the order of the status numbers its scripts use."""


def _source(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.lua").read_text()


def _load(name: str, *, with_lib: bool = False) -> Script:
    """With `with_lib`, `lib.lua`'s helpers go first: the step scripts share them without a
    second round trip."""
    return Script(name, (_source("lib") + "\n" if with_lib else "") + _source(name))


# Run steps ----------------------------------------------------------------------------------


def step_keys(sk: str, run_id: str) -> list[str]:
    """The KEYS of every script that records a run step, in this one order."""
    return [
        keys.run(sk, run_id),
        keys.run_decisions(sk, run_id),
        keys.outbox(sk),
        keys.run_audit(sk, run_id),
        keys.session(sk),
        keys.reconciliation(sk, run_id),
        keys.reconciliation_history(sk, run_id),
    ]


RECORD_STEP = _load("record_step", with_lib=True)
"""KEYS: `step_keys`."""
RECONCILIATION_RESOLVE = _load("reconciliation_resolve", with_lib=True)
"""KEYS: `step_keys`."""
RECONCILIATION_RETRY = _load("reconciliation_retry", with_lib=True)
"""KEYS: `step_keys`."""
RUN_OUTCOME = _load("run_outcome", with_lib=True)
"""KEYS: `step_keys`."""
HISTORY_MOVED = _load("history_moved")
"""KEYS: `step_keys`, then the archive progress keys of the run's attempts."""
ARCHIVE_LOCAL_MOVE = _load("archive_local_move", with_lib=True)


def archive_local_move_keys(sk: str, run_id: str, archive_id: str) -> list[str]:
    return [*step_keys(sk, run_id), keys.archive_copy(sk, archive_id), keys.archive_progress(sk, archive_id)]


OUTBOX_TAKE = _load("outbox_take")
"""KEYS: a session's outbox (`keys.outbox`): the entries of a recorder presumed gone, taken for
one publisher (`Outbox.take`)."""


# Archive progress ---------------------------------------------------------------------------

ARCHIVE_BEGIN = _load("archive_begin", with_lib=True)


def archive_begin_keys(sk: str, run_id: str, archive_id: str) -> list[str]:
    return [keys.archive_progress(sk, archive_id), keys.run_decisions(sk, run_id)]


ARCHIVE_RESULT = _load("archive_result", with_lib=True)
"""KEYS: `archive_progress_keys`."""
ARCHIVE_DONE = _load("archive_done", with_lib=True)
"""KEYS: `archive_progress_keys`."""


def archive_progress_keys(sk: str, archive_id: str) -> list[str]:
    return [keys.archive_progress(sk, archive_id)]


# Reconciliation records ---------------------------------------------------------------------

RECONCILIATION_OPEN = _load("reconciliation_open", with_lib=True)


def reconciliation_open_keys(sk: str, run_id: str) -> list[str]:
    return [
        keys.reconciliation(sk, run_id),
        keys.run_audit(sk, run_id),
        keys.reconciliation_history(sk, run_id),
    ]


RECONCILIATION_INDEX_PUT = _load("reconciliation_index_put")


def reconciliation_index_keys(run_id: str) -> list[str]:
    bucket = keys.reconciliation_bucket(run_id)
    return [keys.reconciliations_open(bucket), keys.reconciliations_delivered(bucket)]


# The runs index -----------------------------------------------------------------------------

RUNS_INDEX_APPLY = _load("runs_index_apply")
"""KEYS: `runs_index_keys`."""
RUNS_INDEX_FORGET = _load("runs_index_forget")
"""KEYS: `runs_index_keys`."""


def runs_index_keys(bucket: int) -> list[str]:
    return [
        keys.runs_index_versions(bucket),
        keys.runs_index_entries(bucket),
        keys.runs_index_listing(bucket),
        *(keys.runs_index_listing(bucket, status) for status in RUN_STATUSES),
    ]


RUNS_INDEX_READ = _load("runs_index_read")


def runs_index_read_keys(bucket: int, status: str | None) -> list[str]:
    return [keys.runs_index_listing(bucket, status), keys.runs_index_entries(bucket)]


# Session records ----------------------------------------------------------------------------

SESSION_COMMIT = _load("session_commit")


def session_commit_keys(sk: str) -> list[str]:
    return [keys.session(sk), keys.held_archive(sk, ""), keys.session_ownership(sk)]


SESSION_CONFIRM = _load("session_confirm")
"""KEYS: `session_reject_keys` (the session hash alone)."""
SESSION_CONFIRMED = _load("session_confirmed")
"""KEYS: `session_reject_keys` (the session hash alone)."""
SESSION_REJECT = _load("session_reject")


def session_reject_keys(sk: str) -> list[str]:
    return [keys.session(sk)]


SESSION_OWNER = _load("session_owner")


def session_owner_keys(sk: str) -> list[str]:
    return [keys.session(sk), keys.session_ownership(sk)]


# Compatibility declarations ------------------------------------------------------------------

COMPATIBILITY_CHANGE = _load("compatibility_change")


def compatibility_keys() -> list[str]:
    return [keys.compatibility_declarations(), keys.compatibility_audit()]
