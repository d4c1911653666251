"""Redis key layout. Every key of one session carries the hash tag `{<session key>}`, so that
each atomic script touches one Redis Cluster slot (architecture: "Layout")."""

from __future__ import annotations

import zlib


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


def reconciliation_history(sk: str, run_id: str) -> str:
    """List of a run's earlier reconciliation records (JSON), when a later attempt reopened it."""
    return f"{reconciliation(sk, run_id)}:history"


def outbox(sk: str) -> str:
    """Hash: message id -> encoded envelope, recorded atomically with the state it announces."""
    return f"continuity:outbox:{{{sk}}}"


OUTBOX_PATTERN = "continuity:outbox:*"


def session_ownership(sk: str) -> str:
    """List of JSON ownership changes of a session (bound, claimed, transferred), newest first."""
    return f"continuity:owners:{{{sk}}}"


def runner(runner_id: str) -> str:
    """String: the runner's directory record (JSON), under a tag of its own."""
    return f"continuity:runner:{{runner:{runner_id}}}"


RUNNERS_INDEX = "continuity:runners"
"""Set of every runner_id the directory holds (a small, operator-written key)."""
RUNNERS_AUDIT = "continuity:runners:audit"
"""List of the directory's changes (JSON), newest first."""


def runner_runs(runner_id: str) -> str:
    """Sorted set of the runs a runner started within the retention (its stored-runs quota)."""
    return f"continuity:stored-runs:{{runner:{runner_id}}}"


def tenant_runs(tenant: str) -> str:
    """The same for all runners of a tenant."""
    return f"continuity:stored-runs:{{tenant:{tenant}}}"


def runner_event_rate(runner_id: str) -> str:
    """Hash `tokens`, `at` (ms, the server's clock): a runner's event-rate bucket, shared by
    every classifier replica, which lease tokens from it (`shared.records.quotas`)."""
    return f"continuity:event-rate:{{runner:{runner_id}}}"


def tenant_event_rate(tenant: str) -> str:
    """The same for all runners of a tenant."""
    return f"continuity:event-rate:{{tenant:{tenant}}}"


def recovery_budget(tenant: str, window: int) -> str:
    """Counter of a tenant's retries and replacements in one window of the storm breaker."""
    return f"continuity:recovery:{{tenant:{tenant}}}:{window}"


def run_index(run_id: str) -> str:
    """String: run_id -> session key; the one lookup that is not under a session's tag."""
    return f"continuity:runidx:{{{run_id}}}"


RECONCILIATION_BUCKETS = 16
"""The reconciliation listing is spread over this many buckets, each its own hash tag (so its
own Redis Cluster slot); a reader merges them. Changing it moves records between buckets: the
services re-index from the legacy keys only, so keep it fixed once deployed."""


def reconciliation_bucket(run_id: str) -> int:
    """The bucket of a run's reconciliation: a stable hash of its run_id."""
    return zlib.crc32(run_id.encode()) % RECONCILIATION_BUCKETS


def reconciliation_member(sk: str, run_id: str) -> str:
    """A run's member in the reconciliation listing: `<session key>\n<run_id>`."""
    return f"{sk}\n{run_id}"


def reconciliations_open(bucket: int) -> str:
    """Sorted set of the bucket's open records, member `<session key>\\n<run_id>`, score the
    opening time (epoch seconds); never trimmed: an open record never expires."""
    return f"continuity:reconciliations:open:{{rb{bucket:02d}}}"


def reconciliations_delivered(bucket: int) -> str:
    """The bucket's delivered records, same members and scores; an entry goes once its record
    has expired (the reconciliation service's refresher trims it)."""
    return f"continuity:reconciliations:delivered:{{rb{bucket:02d}}}"


LEGACY_RECONCILIATION_INDEXES = ("continuity:reconciliations", "continuity:reconciliations:open")
"""The single sorted sets of earlier releases; the reconciliation service moves their entries
into the buckets and removes them."""


RUNS_INDEX_BUCKETS = 16
"""The runs index is spread over this many buckets, a run's bucket a CRC-32 of its run_id; fixed:
changing it needs a new index."""


def runs_index_bucket(run_id: str) -> int:
    return zlib.crc32(run_id.encode()) % RUNS_INDEX_BUCKETS


def _runs_index(bucket: int) -> str:
    return f"continuity:runsidx:{{runs-{bucket}}}"


def runs_index_versions(bucket: int) -> str:
    """Hash: run_id -> `<version>|<status number>` of the run's entry."""
    return f"{_runs_index(bucket)}:versions"


def runs_index_entries(bucket: int) -> str:
    """Hash: run_id -> the run's entry (JSON)."""
    return f"{_runs_index(bucket)}:entries"


def runs_index_listing(bucket: int, status: str | None = None) -> str:
    """Sorted set of the bucket's runs (of one status, or all), scored by decision time."""
    return f"{_runs_index(bucket)}:status:{status}" if status else f"{_runs_index(bucket)}:all"


def compatibility_declarations() -> str:
    """Hash: declaration id -> its JSON (`shared.records.compatibility`); one slot with its audit."""
    return "continuity:{compatibility}:declared"


def compatibility_audit() -> str:
    """List of JSON declaration changes, newest first (bounded)."""
    return "continuity:{compatibility}:audit"
