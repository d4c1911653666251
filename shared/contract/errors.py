"""Error replies (contract section 1): a closed code, an HTTP-like status, sanitized text.

`CATALOGUE` is the one list of the codes a service answers with (contract sections 3, 6 and
9.2), each with its status, a default sanitized message, and the explanation a person reads
when a command gets it. Services raise by code (`NOT_FOUND.error("no such run")`); the
`continuity` command shows the explanation (continuity/cli/explain.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# The reply's body is what a runner decodes too: one home, the runner SDK's errors.
from continuity_runner.errors import ErrorBody as ErrorBody
from continuity_runner.errors import ErrorDetail as ErrorDetail


class ServiceError(Exception):
    """Raised by a handler to answer with an error; `message` must already be sanitized."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class ErrorCode:
    code: str
    status: int
    message: str
    """The default text of the reply; a handler may give a more precise, equally sanitized one."""
    explanation: str
    """What the code means for the person whose command got it, and what to do next. It may name
    `{run}` ("run <id>" or "the run"), `{run_id}`, `{record}` (what a `not_found` is about) and
    `{detail}` (the reply's own text): `explain` fills them in."""

    def explain(self, run_id: str | None, detail: str, record: str | None = None) -> str:
        """The explanation for a reply of this code about `run_id` (or `record`)."""
        run = f"run {run_id}" if run_id else "the run"
        return self.explanation.format(run=run, run_id=run_id, record=record or run, detail=detail)

    def error(self, message: str | None = None) -> ServiceError:
        return ServiceError(self.status, self.code, self.message if message is None else message)


# Input that cannot be decoded (9.2, 9.8); these codes are also dead-letter reasons.
_REJECTED = "the request was rejected: {detail}"
PAYLOAD_TOO_LARGE = ErrorCode("payload_too_large", 400, "the payload is too large", _REJECTED)
MALFORMED_JSON = ErrorCode("malformed_json", 400, "the payload is not a valid UTF-8 JSON object", _REJECTED)
MISSING_FIELD = ErrorCode("missing_field", 400, "a required field is missing", _REJECTED)
INVALID_FIELD = ErrorCode("invalid_field", 400, "a value has the wrong type or format", _REJECTED)
NOT_FOUND = ErrorCode("not_found", 404, "no such record", "{record} is not known here (no such record)")
# Session commits (3.2).
REVISION_CONFLICT = ErrorCode(
    "revision_conflict",
    409,
    "expected_revision does not match the stored revision",
    "the record changed since the given --expected-revision; get it and retry",
)
STALE_EPOCH = ErrorCode(
    "stale_epoch",
    409,
    "epoch is older than the stored epoch",
    "the session was replaced since the given --epoch; this writer is fenced out",
)
SESSION_HELD = ErrorCode(
    "session_held",
    409,
    "the session is held for an operator; commit a new native session instead",
    "the session is held for an operator; commit a new native session instead",
)
# Ownership (10).
SESSION_NOT_OWNED = ErrorCode(
    "session_not_owned",
    409,
    "another runner owns this session; it moves only by a claim or a transfer",
    "another runner owns this session; an operator moves it with `continuity sessions transfer`",
)
CLAIM_REFUSED = ErrorCode(
    "claim_refused",
    409,
    "the policy refuses runners' claims of sessions",
    "runners' claims are refused (CONTINUITY_SESSION_CLAIMS=refuse); ask an operator to transfer it",
)
RUNNER_NOT_ISSUED = ErrorCode(
    "runner_not_issued",
    409,
    "the runner is not issued, or not for the session's tenant",
    "that runner is not issued for the session's tenant (or is revoked): "
    "`continuity runners tenants RUNNER --tenant T`, or issue it with `continuity runners add`",
)
# Reconciliation and operator actions (6, 9.2).
EXECUTION_RECONCILIATION_CONFLICT = ErrorCode(
    "execution_reconciliation_conflict",
    409,
    "the reconciliation was already resolved with another outcome",
    "{run} was already resolved with another outcome; see `continuity reconciliations show {run_id}`",
)
EXECUTION_RECONCILIATION_ALREADY_DELIVERED = ErrorCode(
    "execution_reconciliation_already_delivered",
    409,
    "this resolution was already recorded and its decision delivered",
    "{run} was already resolved with this outcome; its decision was delivered, nothing to do",
)
RECONCILIATION_REQUIRED = ErrorCode(
    "reconciliation_required",
    409,
    "the run waits on a reconciliation: resolve it instead of retrying",
    "{run} waits on a reconciliation, it cannot be retried: record what the pending tool "
    "call did with `continuity reconciliations resolve {run_id} --outcome ...`",
)
RUN_NOT_STOPPED = ErrorCode(
    "run_not_stopped",
    409,
    "the run is not stopped for an operator",
    "{run} is not stopped for an operator: {detail}",
)
OPERATOR_RETRY_ALREADY_DELIVERED = ErrorCode(
    "operator_retry_already_delivered",
    409,
    "a fresh continuation was already delivered for this attempt of the run",
    "a fresh continuation was already delivered for this attempt of {run}; nothing to do",
)
RUN_CHANGED = ErrorCode(
    "run_changed",
    409,
    "the run changed while this request was handled",
    "{run} changed while the request was handled; show it and try again",
)
# Policies (9.11).
POLICY_REFUSED = ErrorCode(
    "policy_refused",
    400,
    "the policy breaks an invariant or is not a policy",
    "the policy was refused: {detail}; fix it (`continuity policy check FILE`) and try again",
)
# Faults (9.2): nothing of the cause is echoed.
INTERNAL_ERROR = ErrorCode(
    "internal_error", 500, "internal error", "the service failed on this request; see its logs"
)
UNAVAILABLE = ErrorCode(
    "unavailable",
    503,
    "a backing store is unavailable; retry later",
    "the service's store is unavailable; retry later",
)

CATALOGUE: dict[str, ErrorCode] = {
    e.code: e
    for e in (
        PAYLOAD_TOO_LARGE,
        MALFORMED_JSON,
        MISSING_FIELD,
        INVALID_FIELD,
        NOT_FOUND,
        REVISION_CONFLICT,
        STALE_EPOCH,
        SESSION_HELD,
        SESSION_NOT_OWNED,
        CLAIM_REFUSED,
        RUNNER_NOT_ISSUED,
        EXECUTION_RECONCILIATION_CONFLICT,
        EXECUTION_RECONCILIATION_ALREADY_DELIVERED,
        RECONCILIATION_REQUIRED,
        RUN_NOT_STOPPED,
        OPERATOR_RETRY_ALREADY_DELIVERED,
        RUN_CHANGED,
        POLICY_REFUSED,
        INTERNAL_ERROR,
        UNAVAILABLE,
    )
}


def not_found(message: str = NOT_FOUND.message) -> ServiceError:
    return NOT_FOUND.error(message)


def conflict(code: str, message: str) -> ServiceError:
    return ServiceError(409, code, message)


def unavailable(message: str = UNAVAILABLE.message) -> ServiceError:
    return UNAVAILABLE.error(message)
