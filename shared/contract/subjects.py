"""Every NATS subject, stream and consumer name of the contract (section 2), in one place."""

from __future__ import annotations

EVENTS_STREAM = "CONTINUITY_EVENTS"
DECISIONS_STREAM = "CONTINUITY_DECISIONS"
WORK_STREAM = "CONTINUITY_WORK"
DEAD_STREAM = "CONTINUITY_DEAD"
HISTORY_STREAM = "CONTINUITY_HISTORY"  # an addition: finished runs' records (section 9.14)

EVENTS_ALL = "continuity.events.>"
DECISIONS_ALL = "continuity.decisions.>"
WORK_ARCHIVE = "continuity.work.archive"
WORK_RECONCILE = "continuity.work.reconcile"
DEAD_ALL = "continuity.dead.>"
DEAD_INVALID = "continuity.dead.invalid"
DEAD_QUARANTINE = "continuity.dead.quarantine"
DEAD_EXHAUSTED = "continuity.dead.exhausted"
HISTORY_ALL = "continuity.history.>"
HISTORY_RUN = "continuity.history.run."  # + the run_id, base64url: a run_id may hold '.'
HISTORY_LIST = "continuity.history.list."  # + day, hour, status, tenant, runner, reason, run
HISTORY_LISTED = "continuity.history.listed."  # + the run_id, base64url: its listing's subject
DEAD_REFUSED = "continuity.dead.refused"  # an addition: events a runner may not send (section 10)

SESSIONS_DECIDE = "continuity.sessions.decide"
SESSIONS_COMMIT = "continuity.sessions.commit"
SESSIONS_GET = "continuity.sessions.get"
SESSIONS_REJECT = "continuity.sessions.reject"
RECONCILIATIONS_LIST = "continuity.reconciliations.list"
RECONCILIATIONS_GET = "continuity.reconciliations.get"
RECONCILIATIONS_RESOLVE = "continuity.reconciliations.resolve"
RUNS_GET = "continuity.runs.get"
RUNS_AUDIT = "continuity.runs.audit"  # an addition: a run's audit trail
RUNS_LIST = "continuity.runs.list"  # an addition: runs by status, runner, tenant, reason, age
RUNS_STATS = "continuity.runs.stats"  # an addition: the policy judged by outcomes (4.6)
OPERATOR_RETRY = "continuity.operator.retry"

# Ownership and the runner directory (contract section 10). A runner's session requests carry
# its runner_id as the third token: under the shipped authorization each runner's account
# imports only its own, so the token is the server's word, not the runner's.
SESSION_OPS = ("decide", "commit", "get", "reject", "claim")
SESSIONS_TRANSFER = "continuity.sessions.transfer"
SESSIONS_AUDIT = "continuity.sessions.audit"
RUNNERS_PUT = "continuity.runners.put"
RUNNERS_REVOKE = "continuity.runners.revoke"
RUNNERS_GET = "continuity.runners.get"
RUNNERS_LIST = "continuity.runners.list"
RUNNERS_CONSUMER = "continuity.runners.consumer"  # a runner's decisions consumer, made by the service
COMPATIBILITY_DECLARE = "continuity.compatibility.declare"  # additions: declared compatibility
COMPATIBILITY_REVOKE = "continuity.compatibility.revoke"
COMPATIBILITY_LIST = "continuity.compatibility.list"
SESSIONS_PREVIEW = "continuity.sessions.preview"  # a rollout's effect on the saved sessions
POLICY_REPLAY = "continuity.policy.replay"  # recorded decisions under a candidate policy

QUEUE_GROUP = "q"

CLASSIFIER_CONSUMER = "classifier"
ARCHIVER_CONSUMER = "archiver"
RECONCILIATION_CONSUMER = "reconciliation"
RUNS_INDEX_CONSUMER = "continuity:runs-index"
"""The reconciliation service's consumer of CONTINUITY_DECISIONS, which keeps the runs index.
Runners' decisions consumers are named after their runner_id, which cannot hold `:`, so no
runner can ever be given this consumer."""


def event(runner_id: str, event_type: str) -> str:
    return f"continuity.events.{runner_id}.{event_type}"


def decisions(runner_id: str) -> str:
    return f"continuity.decisions.{runner_id}"


RESUME_FAILED = "resume_failed"
TURN_COMPLETED = "turn_completed"
EVENT_TYPES = (RESUME_FAILED, TURN_COMPLETED)
"""The event types a runner may send, the last token of its event subject (4.1, 4.6)."""


def outcomes(runner_id: str) -> str:
    """`continuity.decisions.<runner_id>.outcome` (4.6): in CONTINUITY_DECISIONS for the runs
    index, outside the runner's consumer, which takes `continuity.decisions.<runner_id>` alone."""
    return f"continuity.decisions.{runner_id}.outcome"


def runner_archive(runner_id: str) -> str:
    return f"continuity.runner.{runner_id}.archive"


def runner_sessions(runner_id: str, op: str) -> str:
    """`continuity.sessions.<runner_id>.<op>`: where a runner sends its session requests."""
    return f"continuity.sessions.{runner_id}.{op}"


def runner_sessions_pattern(op: str) -> str:
    """The subscription of every runner's `op` requests."""
    return f"continuity.sessions.*.{op}"


RUNNER_SESSIONS_TOKEN = 2
"""The position of the runner_id in `continuity.sessions.<runner_id>.<op>`."""


def runner_of_event_subject(subject: str) -> str | None:
    """The runner token of `continuity.events.<runner_id>.<event_type>`, or None if malformed."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[0] != "continuity" or parts[1] != "events":
        return None
    return parts[2]
