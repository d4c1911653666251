/** Typed errors: one class per contract error code (sections 1, 3, 6, 9.2 and 10). */

export class ContinuityError extends Error {
  readonly status: number;
  readonly code: string;

  constructor(status: number, code: string, message: string) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
  }
}

/**
 * 400: `malformed_json`, `missing_field`, `invalid_field`, `payload_too_large`, or any other 400
 * code. Raised by a service, or by the SDK itself before anything is sent: every argument, event
 * and request is checked against contract v1 as the services check it (src/checks.ts). A local
 * refusal names the field as the contract does (`error.code`, `session.tenant`, `runner_id`) in
 * `field`, never its value.
 */
export class InvalidRequest extends ContinuityError {
  /** The refused field's contract path; null for a whole message or a service's reply. */
  readonly field: string | null;

  constructor(status: number, code: string, message: string, field: string | null = null) {
    super(status, code, message);
    this.field = field;
  }
}
/** 404 `not_found`. */
export class NotFound extends ContinuityError {}
/** 409: a conflict with the stored state; the subclasses name the contract's codes. */
export class Conflict extends ContinuityError {}
/** 409 `revision_conflict`: `expectedRevision` is not the stored revision; nothing was written. */
export class RevisionConflict extends Conflict {}
/** 409 `stale_epoch`: the commit's epoch is older than the stored one (a replacement happened). */
export class StaleEpoch extends Conflict {}
/** 409 `session_held`: the saved session is held for an operator and cannot be reactivated. */
export class SessionHeld extends Conflict {}
/** 409 `session_not_owned`: another runner of the session's tenant owns it (contract 10.3); nothing
 * was written. It moves only by an operator's transfer or, where the policy allows, a `claim`. */
export class SessionNotOwned extends Conflict {}
/** 409 `claim_refused`: the services refuse runners' claims (`CONTINUITY_SESSION_CLAIMS` is not
 * `allow`); an operator's transfer moves the session instead. */
export class ClaimRefused extends Conflict {}
/** 409 `runner_not_issued`: a transfer to a runner not issued for the session's tenant (an
 * operators' request, not a runner's). */
export class RunnerNotIssued extends Conflict {}
/** 409 `reconciliation_required`. */
export class ReconciliationRequired extends Conflict {}
/** 409 `run_not_stopped`. */
export class RunNotStopped extends Conflict {}
/** 409 `run_changed`. */
export class RunChanged extends Conflict {}
/** 409 `execution_reconciliation_conflict`. */
export class ExecutionReconciliationConflict extends Conflict {}
/** 409 `execution_reconciliation_already_delivered`. */
export class ExecutionReconciliationAlreadyDelivered extends Conflict {}
/** 409 `operator_retry_already_delivered`. */
export class OperatorRetryAlreadyDelivered extends Conflict {}
/** 500 `internal_error`. */
export class InternalError extends ContinuityError {}
/** 503 `unavailable`; also no service answering the subject at all. Retry later. */
export class Unavailable extends ContinuityError {}
/** No answer within `requestTimeout`: the request may or may not have been applied. */
export class RequestTimeout extends ContinuityError {}
/** 403 `permission_denied`: the NATS server's authorization refused a publication or a
 * subscription (not a contract code: no service saw it). Under the shipped authorization a
 * runner may only use its own subjects. Raised as soon as the server says so. */
export class PermissionDenied extends ContinuityError {}

type ErrorClass = new (status: number, code: string, message: string) => ContinuityError;

const BY_CODE: Record<string, ErrorClass> = {
  not_found: NotFound,
  revision_conflict: RevisionConflict,
  stale_epoch: StaleEpoch,
  session_held: SessionHeld,
  session_not_owned: SessionNotOwned,
  claim_refused: ClaimRefused,
  runner_not_issued: RunnerNotIssued,
  reconciliation_required: ReconciliationRequired,
  run_not_stopped: RunNotStopped,
  run_changed: RunChanged,
  execution_reconciliation_conflict: ExecutionReconciliationConflict,
  execution_reconciliation_already_delivered: ExecutionReconciliationAlreadyDelivered,
  operator_retry_already_delivered: OperatorRetryAlreadyDelivered,
  internal_error: InternalError,
  unavailable: Unavailable,
};

const BY_STATUS: Record<number, ErrorClass> = {
  400: InvalidRequest,
  404: NotFound,
  409: Conflict,
  500: InternalError,
  503: Unavailable,
};

/** The typed error of an error reply: by code first, then by status. */
export function errorFor(status: number, code: string, message: string): ContinuityError {
  const cls = BY_CODE[code] ?? BY_STATUS[status] ?? ContinuityError;
  return new cls(status, code, message);
}
