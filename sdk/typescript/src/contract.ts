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
  | "unclassified";
export type RecordedOutcome = "completed" | "not_performed";
export type ActionOutcome = RecordedOutcome | "mixed";

/** The slot that owns one saved native session (contract section 1). */
export interface SessionRef {
  tenant: string;
  conversation_id: string;
  agent_id: string;
}

/** `continuity.sessions.decide` (3.3). */
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
}

export interface DecideReply {
  mode: "resume" | "fresh";
  resume_session_id: string | null;
  transcript: "incremental" | "full";
  reason: string | null;
  revision: number | null;
  epoch: number | null;
}

/** `continuity.sessions.commit` (3.2). */
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
}

export interface CommitReply {
  revision: number;
  epoch: number;
}

export interface RejectReply {
  cleared: boolean;
}

/** `continuity.sessions.get` (3.5): the record without secrets. */
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
  reason: string;
  failure_class: FailureClass | null;
  epoch: number | null;
  not_before: string | null;
  detail: string | null;
  reconciled_outcome: ActionOutcome | null;
  decided_at: string;
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
/** Contract 9.8: a UTC instant, `Z` or `+00:00`, seconds 00-59 (no leap second), year 0001-9999;
 * the day is also checked against its month (`checks.ts`). `\d` is ASCII here, as the SDKs require. */
export const TIME_PATTERN =
  /^(?!0000)\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|\+00:00)$/;

/** RFC 3339 in UTC with milliseconds, as every service writes times. */
export function nowRfc3339(): string {
  return new Date().toISOString();
}
