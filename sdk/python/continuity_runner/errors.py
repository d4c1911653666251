"""Typed errors: one class per error code of the contract, all `ContinuityError`s.

A service answers a failed request with `{"error": {"code", "message"}}` and the status in the
`Nats-Service-Error-Code` header; `error_from_reply` turns that into the matching class. A code
this SDK does not know yet becomes the class of its status (or `ContinuityError`), so a newer
service never breaks an older runner.

The reply's body (`ErrorBody`) is defined here, beside the classes it becomes: this module
imports nothing of the SDK, so the contract's Structs, whose checks raise `InvalidRequest`,
can import it.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec


class ErrorDetail(msgspec.Struct):
    code: str
    message: str


class ErrorBody(msgspec.Struct):
    """`{"error": {"code", "message"}}`: a service's answer to a failed request (contract 1)."""

    error: ErrorDetail


class ContinuityError(Exception):
    """A failed request or publication. `message` is the service's sanitized text."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


class InvalidRequest(ContinuityError, ValueError):
    """400: `malformed_json`, `missing_field`, `invalid_field` or `payload_too_large` (see `.code`).

    Raised by the service, or by the SDK itself before anything is sent: every argument, event
    and request is checked against contract v1 (its patterns, closed sets, times, the limits of
    its section 9.8) as the services check it. A local refusal names the field as the contract
    does (`error.code`, `session.tenant`, `runner_id`) in `.field`, never its value. It is also a
    `ValueError`, the exception Python raises for a bad argument.
    """

    status = 400
    code = "invalid_field"

    def __init__(
        self, message: str, *, status: int | None = None, code: str | None = None, field: str | None = None
    ) -> None:
        super().__init__(message, status=status, code=code)
        self.field = field
        """The refused field's contract path; None for a whole message or a service's reply."""


class NotFound(ContinuityError):
    status = 404
    code = "not_found"


class Conflict(ContinuityError):
    """409: the request contradicts the stored state; the subclass names which way."""

    status = 409
    code = "conflict"


class RevisionConflict(Conflict):
    """`expected_revision` is not the stored revision: nothing was written."""

    code = "revision_conflict"


class StaleEpoch(Conflict):
    """The commit's `epoch` is older than the stored one: a runner from before a replacement."""

    code = "stale_epoch"


class SessionHeld(Conflict):
    """The saved session is held for an operator: a commit of the same handle cannot reactivate it."""

    code = "session_held"


class SessionNotOwned(Conflict):
    """Another runner of the session's tenant owns the session (contract 10.3): nothing was
    written. It moves only by an operator's transfer or, where the policy allows, a `claim`."""

    code = "session_not_owned"


class ClaimRefused(Conflict):
    """The services refuse runners' claims (`CONTINUITY_SESSION_CLAIMS` is not `allow`): an
    operator's transfer moves the session instead."""

    code = "claim_refused"


class RunnerNotIssued(Conflict):
    """A transfer to a runner not issued for the session's tenant (an operators' request; a
    runner does not get it, but a connection of the services' own account may)."""

    code = "runner_not_issued"


class RunNotStopped(Conflict):
    code = "run_not_stopped"


class RunChanged(Conflict):
    code = "run_changed"


class OperatorRetryAlreadyDelivered(Conflict):
    code = "operator_retry_already_delivered"


class ReconciliationRequired(Conflict):
    code = "reconciliation_required"


class ReconciliationConflict(Conflict):
    code = "execution_reconciliation_conflict"


class ReconciliationAlreadyDelivered(Conflict):
    code = "execution_reconciliation_already_delivered"


class InternalError(ContinuityError):
    status = 500
    code = "internal_error"


class PermissionDenied(ContinuityError):
    """The NATS server's authorization refused a publication (not a contract code: no service
    saw the request). Under the shipped authorization a runner may only use its own subjects."""

    status = 403
    code = "permission_denied"


class Unavailable(ContinuityError):
    """503, or no service answered in time: retry later."""

    status = 503
    code = "unavailable"


_BY_CODE: dict[str, type[ContinuityError]] = {
    "malformed_json": InvalidRequest,
    "missing_field": InvalidRequest,
    "invalid_field": InvalidRequest,
    "payload_too_large": InvalidRequest,
    "not_found": NotFound,
    "revision_conflict": RevisionConflict,
    "stale_epoch": StaleEpoch,
    "session_held": SessionHeld,
    "session_not_owned": SessionNotOwned,
    "claim_refused": ClaimRefused,
    "runner_not_issued": RunnerNotIssued,
    "run_not_stopped": RunNotStopped,
    "run_changed": RunChanged,
    "operator_retry_already_delivered": OperatorRetryAlreadyDelivered,
    "reconciliation_required": ReconciliationRequired,
    "execution_reconciliation_conflict": ReconciliationConflict,
    "execution_reconciliation_already_delivered": ReconciliationAlreadyDelivered,
    "internal_error": InternalError,
    "unavailable": Unavailable,
}
_BY_STATUS: dict[int, type[ContinuityError]] = {
    400: InvalidRequest,
    404: NotFound,
    409: Conflict,
    500: InternalError,
    503: Unavailable,
}


_decode_error_body = msgspec.json.Decoder(ErrorBody).decode


def error_class(status: int, code: str) -> type[ContinuityError]:
    """The class of `code`, else of `status`, else `ContinuityError`."""
    return _BY_CODE.get(code) or _BY_STATUS.get(status) or ContinuityError


def error_from_reply(data: bytes, headers: Mapping[str, str] | None) -> ContinuityError | None:
    """The error a reply carries, or None when it is a success."""
    raw_status = (headers or {}).get("Nats-Service-Error-Code")
    if not raw_status:
        return None
    try:
        status = int(raw_status)
    except ValueError:
        status = 500
    try:
        detail = _decode_error_body(data).error
        code, message = detail.code, detail.message
    except msgspec.MsgspecError:
        code, message = "", (headers or {}).get("Nats-Service-Error", "")
    cls = error_class(status, code)
    return cls(message, status=status, code=code or None)
