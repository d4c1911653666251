/** Contract v1 messages (docs/contract-v1.md), as the runner sends and receives them. */

export type CheckpointPolicy =
  | "same_session_only"
  | "allow_replacement_after_governed_wait"
  | "allow_replacement_after_resume_failure";
export type SessionState = "active" | "held" | "archived" | "rejected";
export type Compatibility = "none" | "profile-ready";
export type RejectCode = "resume_target_missing" | "resume_target_corrupt";
export type Action = "retry_same_session" | "open_replacement" | "operator" | "reconcile" | "continue_fresh";
export type FailureClass =
  | "provider_attach_refused"
  | "provider_side_effect_pending"
  | "source_reconciliation_required"
  | "provider_state_incompatible"
  | "event_replay_conflict"
  | "native_session_missing"
  | "context_overflow"
  | "transcript_corrupt"
  | "session_busy"
  | "unclassified";
export type RecordedOutcome = "completed" | "not_performed";
export type ActionOutcome = RecordedOutcome | "mixed";
/** Why a decision was made (contract 4.4, 9.4 and 10.6). */
export type DecisionReason =
  | "native_provider_side_effect_pending"
  | "native_provider_state_incompatible"
  | "native_runner_source_reconciliation_required"
  | "native_event_replay_conflict"
  | "native_session_retry_exhausted"
  | "native_session_continuity_break"
  | "native_session_interrupted"
  | "runner_continuity_break_archive_failed"
  | "execution_reconciled"
  | "operator_retry"
  | "tenant_recovery_budget_exhausted"
  | "native_session_missing"
  | "native_context_overflow"
  | "native_transcript_corrupt"
  | "native_session_busy";
/** Why an event was refused before any decision (contract 10.5); only `quota_exceeded` is not
 * final: the same report is sent again, with a new event id, at or after `not_before`. */
export type RefusalCode =
  | "runner_not_registered"
  | "runner_revoked"
  | "tenant_not_allowed"
  | "session_not_owned"
  | "run_not_owned"
  | "quota_exceeded";
export type QuotaScope = "runner" | "tenant";
/** Events a second (`not_before` within seconds), or runs kept within the run retention
 * (`not_before` when the oldest leaves it: hours or days). */
export type QuotaKind = "event_rate" | "stored_runs";

/** The closed names of a compatibility generation's components (contract 9.11), in name order. */
export type ComponentName =
  | "composition"
  | "cwd"
  | "executable"
  | "mcp_servers"
  | "model_route"
  | "permission_mode"
  | "plugins"
  | "protocol"
  | "reasoning_effort";
/** `{name: digest}`: each component's lowercase hex SHA-256 (1 to 9 entries). */
export type ComponentDigests = Partial<Record<ComponentName, string>>;
/** What gives its components' digests: a `harness.Components`. */
export interface HasComponentDigests {
  digests(): ComponentDigests;
}

/** The slot that owns one saved native session (contract section 1). */
export interface SessionRef {
  tenant: string;
  conversation_id: string;
  agent_id: string;
}

/** `continuity.sessions.<runner_id>.decide` (3.3, 10.1). */
export interface DecideArgs {
  session: SessionRef;
  adapter: string;
  model: string;
  cwd: string;
  /** Default null. */
  latestCursor?: string | null;
  /** Default "none". */
  compatibility?: Compatibility;
  /** Default null. */
  readyGeneration?: string | null;
  /** The components `readyGeneration` is made of (a `harness.Components`, or their digests):
   * without `readyGeneration` it is theirs; with it, it must be (else `InvalidRequest`, field
   * `ready_components`). Default null. */
  readyComponents?: ComponentDigests | HasComponentDigests | null;
}

/** How a `decide` compared the compatibility generations (never a value): `not_compared` under
 * compatibility `none`, `declared` when they differ and an operator declared that the newer one
 * resumes the older (contract 9.11). */
export type GenerationCheck = "not_compared" | "matched" | "changed" | "missing" | "declared";

/** `resume` with the stored handle and an incremental turn, or `fresh` with the full one. `rule`,
 * `policy` and `generation` explain the answer (contract 9.11); from services of an earlier release,
 * which send none of them, `decide` returns null, null and `not_compared`. */
export interface DecideReply {
  mode: "resume" | "fresh";
  resume_session_id: string | null;
  transcript: "incremental" | "full";
  reason: string | null;
  revision: number | null;
  epoch: number | null;
  /** The id of the contract 3.3 clause that answered (`3.3.1a` to `3.3.4` in the shipped policy). */
  rule: string | null;
  /** The version of the policy that answered (`shipped-1`). */
  policy: string | null;
  generation: GenerationCheck;
  /** The id of the operator's declaration that let it resume across a changed generation. */
  declaration: string | null;
  /** The names of the components that differ between the saved generation and the ready one
   * (`generation` `changed` or `declared`, both with components); never a value or a digest. */
  changed_components: ComponentName[] | null;
}

/** `continuity.sessions.<runner_id>.commit` (3.2, 10.1). */
export interface CommitArgs {
  session: SessionRef;
  nativeSessionId: string;
  adapter: string;
  model: string;
  cwd: string;
  /** Default null. */
  cursor?: string | null;
  promptHash?: string | null;
  checkpointPolicy: CheckpointPolicy;
  compatibilityGeneration?: string | null;
  expectedRevision?: number | null;
  epoch?: number | null;
  cancelled?: boolean;
  /** The components `compatibilityGeneration` is made of (a `harness.Components`, or their
   * digests): without `compatibilityGeneration` it is theirs; with it, it must be (else
   * `InvalidRequest`, field `compatibility_components`). A later decide names the components that
   * changed. Default null. */
  compatibilityComponents?: ComponentDigests | HasComponentDigests | null;
}

export interface CommitReply {
  revision: number;
  epoch: number;
}

export interface RejectReply {
  cleared: boolean;
}

/** `continuity.sessions.<runner_id>.get` (3.5, 10.1): the record without secrets. */
export interface SessionView {
  native_session_id: string;
  adapter: string;
  model: string;
  cwd: string;
  cursor: string;
  checkpoint_policy: string;
  state: SessionState;
  revision: number;
  epoch: number;
  updated_at: string;
  has_generation: boolean;
  generation_trusted: boolean;
  /** The runner that owns the session; null before its first commit by a runner. */
  owner?: string | null;
  /** The names of the components the stored generation was committed with. */
  components?: ComponentName[] | null;
  /** The components that changed at the commit that last changed the stored generation. */
  changed_components?: ComponentName[] | null;
}

/** The session's owner after `claim` (10.3), and the epoch that fences the previous owner (its
 * commits with an older epoch get `StaleEpoch`). */
export interface OwnershipReply {
  owner: string;
  previous_owner: string | null;
  epoch: number;
  revision: number;
}

/** A typed runner error (4.1); `message` is for the runner's own logs, never read by Continuity. */
export interface ErrorInfo {
  type: string;
  code: string;
  message?: string;
}

/** A signed command result (4.2). */
export interface CommandResult {
  command: string;
  status: string;
  classification: string | null;
  issued_at: string;
  key_id: string;
  signature: string;
}

export interface ToolCall {
  tool_call_id: string;
  tool_name: string;
  started_at: string;
  recorded_outcome?: RecordedOutcome | null;
}

/** The harness the run's session lives in (4.6): `name` as the harness table spells it
 * (`claude-code`, `codex`, ...), `version` as the harness reports it. Continuity groups the
 * outcomes of its decisions by it, and never decides by it. */
export interface HarnessInfo {
  name: string;
  version?: string | null;
}

/** The `resume_failed` event (4.1). */
export interface ResumeFailed {
  type: "resume_failed";
  event_id: string;
  runner_id: string;
  run_id: string;
  attempt: number;
  session: SessionRef;
  native_session_id: string;
  occurred_at: string;
  error: ErrorInfo | null;
  command_result: CommandResult | null;
  pending_tool_call: ToolCall | null;
  governed_wait_elapsed: boolean;
  /** The harness the session lives in (4.6). */
  harness: HarnessInfo | null;
}

/** The signed result of a `turn_completed` event: command `turn`, status `completed`, no
 * classification (4.6). */
export const TURN_COMMAND = "turn";
export const TURN_STATUS = "completed";

/** The `turn_completed` event (4.6): the session of a decided attempt completed a turn. `attempt`
 * is the decision's own; `result` is signed as a command result is (4.2). */
export interface TurnCompleted {
  type: "turn_completed";
  event_id: string;
  runner_id: string;
  run_id: string;
  attempt: number;
  session: SessionRef;
  native_session_id: string;
  occurred_at: string;
  result: CommandResult;
  harness: HarnessInfo | null;
}

/** A recovery decision on `continuity.decisions.<runner_id>` (4.5). */
export interface Decision {
  type: "decision";
  decision_id: string;
  runner_id: string;
  run_id: string;
  attempt: number;
  session: SessionRef;
  action: Action;
  reason: DecisionReason;
  failure_class: FailureClass | null;
  epoch: number | null;
  not_before: string | null;
  detail: string | null;
  reconciled_outcome: ActionOutcome | null;
  decided_at: string;
  /** The id of the contract 4.4 table row that made the decision (`4.4.1` to `4.4.9` in the
   * shipped policy, contract 9.11); null for an operator's or a reconciliation's decision, which no
   * row makes, and for a decision of services of an earlier release (which sends none). */
  rule: string | null;
}

/**
 * On `continuity.decisions.<runner_id>` beside the decisions: the runner's event was refused
 * before any decision (10.5). With `quota_exceeded`, send the same report again (a new event id)
 * at or after `not_before` (`Runner.reportAgain`); any other code is final for that event.
 */
export interface Refusal {
  type: "refusal";
  runner_id: string;
  run_id: string;
  attempt: number;
  event_id: string;
  code: RefusalCode;
  scope: QuotaScope | null;
  quota: QuotaKind | null;
  not_before: string | null;
  refused_at: string;
}

/** The archiver's remote move, on `continuity.runner.<runner_id>.archive` (5.1). */
export interface ArchiveRequest {
  archive_id: string;
  run_id: string;
  session: SessionRef;
  native_session_id: string;
}

export interface ArchiveResult {
  exit_code: number | null;
  timed_out: boolean;
  output: string;
}

/** Contract 1: `runner_id` is a subject token; the other identifiers are TOKENs. (`$` in a
 * JavaScript pattern without the `m` flag matches only at the very end: no trailing newline.) */
export const RUNNER_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
export const TOKEN_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
/** Contract 4.6: a harness's name as the harness table spells it, and its version. */
export const HARNESS_NAME_PATTERN = /^[a-z0-9][a-z0-9._-]{0,63}$/;
export const HARNESS_VERSION_PATTERN = /^[0-9A-Za-z][0-9A-Za-z.\+_-]{0,63}$/;
/** Contract 9.8: a UTC instant, `Z` or `+00:00`, seconds 00-59 (no leap second), year 0001-9999;
 * the day is also checked against its month (`checks.ts`). `\d` is ASCII here, as the SDKs require. */
export const TIME_PATTERN =
  /^(?!0000)\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|\+00:00)$/;

/** RFC 3339 in UTC with milliseconds, as every service writes times. */
export function nowRfc3339(): string {
  return new Date().toISOString();
}
