"""Redis key layout. Every key of one session carries the hash tag `{<session key>}`, so that
each atomic script touches one Redis Cluster slot (architecture: "Layout")."""

from __future__ import annotations


def session(sk: str) -> str:
    return f"continuity:session:{{{sk}}}"


def held_archive(sk: str, native_session_id: str) -> str:
    return f"continuity:archive:{{{sk}}}:held:{native_session_id}"


def archive_copy(sk: str, archive_id: str) -> str:
    return f"continuity:archive:{{{sk}}}:{archive_id}"


def archive_progress(sk: str, archive_id: str) -> str:
    return f"continuity:archiveop:{{{sk}}}:{archive_id}"


def run(sk: str, run_id: str) -> str:
    """Hash: run_id, runner_id, session, attempt, status, last_decision (JSON)."""
    return f"continuity:run:{{{sk}}}:{run_id}"


def run_decisions(sk: str, run_id: str) -> str:
    """Hash: attempt -> decision JSON; the guard of one decision per (run_id, attempt)."""
    return f"continuity:decisions:{{{sk}}}:{run_id}"


def run_audit(sk: str, run_id: str) -> str:
    """List of JSON audit entries of a run, oldest first."""
    return f"continuity:audit:{{{sk}}}:{run_id}"


def reconciliation(sk: str, run_id: str) -> str:
    return f"continuity:reconciliation:{{{sk}}}:{run_id}"


def outbox(sk: str) -> str:
    """Hash: message id -> encoded envelope, recorded atomically with the state it announces."""
    return f"continuity:outbox:{{{sk}}}"


OUTBOX_PATTERN = "continuity:outbox:*"


def run_index(run_id: str) -> str:
    """String: run_id -> session key; the one lookup that is not under a session's tag."""
    return f"continuity:runidx:{{{run_id}}}"


RECONCILIATION_INDEX = "continuity:reconciliations"
"""Sorted set of `<session key>\\n<run_id>` by opening time, for listing."""
