/**
 * `runner.recover(adapter, outcome, args)`: from what a resume left to what Continuity is told,
 * in one call. The outcome is assessed with the harness's rules; a failure is reported as a
 * `resume_failed` carrying a command result signed with the class (so the classifier trusts it),
 * unless the probe finds the session absent from the host: then the saved handle is rejected
 * (contract 3.4, `resume_target_missing`), and the next `decide` starts fresh with the full
 * transcript. An outcome that is not a failure sends nothing, unless the resume followed a
 * decision (`decidedAttempt`): then a `turn_completed` tells Continuity the decision worked
 * (contract 4.6). Both events name the harness (`harness`), as the Python SDK's do.
 */

import { ATTEMPT, checkValue, encodeChecked, GET_REQUEST, HARNESS_NAME, HARNESS_VERSION, LIMITS, TOKEN } from "../checks.js";
import type { HarnessInfo, SessionRef, ToolCall } from "../contract.js";
import type { Runner, TraceOptions } from "../runner.js";
import type { Adapter } from "./adapter.js";
import type { Outcome } from "./match.js";
import type { Env, Presence } from "./probe.js";
import type { HarnessClass } from "./table.js";

export interface RecoverArgs extends TraceOptions {
  runId: string;
  attempt: number;
  session: SessionRef;
  /** The harness's session id the resume was for. */
  nativeSessionId: string;
  /** The working directory the session was saved in (the probe of harnesses keyed by it). */
  cwd?: string;
  /** The environment the harness ran with (its sessions' root, HOME); default process.env. */
  env?: Env;
  /** Ask the presence probe before reporting (default true); false: report without it
   * (`presence` null), never rejecting. */
  probeFirst?: boolean;
  /** The signed result's `command`; default `<harness>.resume`. */
  command?: string;
  pendingToolCall?: ToolCall | null;
  governedWaitElapsed?: boolean;
  /** Generated when absent; give the same id to re-send the same event (the `turn_completed`'s
   * when one is sent). */
  eventId?: string;
  /** The harness's version, as it reports it (`2.1.332`): both events name the harness as
   * `{ name: adapter.name, version: harnessVersion }`. Default null. */
  harnessVersion?: string | null;
  /** The `attempt` of the decision this resume followed (a `retry_same_session`): when the
   * outcome is not a failure, a `turn_completed` for that attempt is published (contract 4.6).
   * Default null: nothing is sent for an outcome that is not a failure. */
  decidedAttempt?: number | null;
}

/** The rule said the outcome is not a failure: the resumed session completed its turn. Without
 * `decidedAttempt` nothing was sent (`reported_event_id` null); with it, a `turn_completed` for
 * that attempt was published, whose event id is `reported_event_id`. */
export class NotAFailure {
  readonly kind = "not_a_failure" as const;
  constructor(
    readonly rule: string,
    readonly reported_event_id: string | null = null,
  ) {}
}

/** A `resume_failed` was sent (its id), with a command result signed with `failure_class`
 * (classification null for `unclassified`); the decision comes on the decisions subject.
 * `presence`: what the probe said (`present` or `unknown`), null when it was not asked. */
export class Reported {
  readonly kind = "reported" as const;
  constructor(
    readonly event_id: string,
    readonly failure_class: HarnessClass,
    readonly rule: string,
    readonly presence: Presence | null,
  ) {}
}

/** The probe found the session absent from the host: the saved handle was rejected
 * (`resume_target_missing`; `cleared` as the session-store answered: false when the record saves
 * another handle). Nothing was reported. */
export class Rejected {
  readonly kind = "rejected" as const;
  readonly code = "resume_target_missing" as const;
  constructor(
    readonly failure_class: HarnessClass,
    readonly rule: string,
    readonly cleared: boolean,
  ) {}
}

export type Verdict = NotAFailure | Reported | Rejected;

/** The command result's status of a failed resume. */
export const FAILED_STATUS = "failed";

/** See `Runner.recover`. */
export async function recover(runner: Runner, adapter: Adapter, outcome: Outcome, args: RecoverArgs): Promise<Verdict> {
  // Everything is checked before the probe looks or anything is sent.
  checkValue(TOKEN, args.runId, "run_id");
  checkValue(ATTEMPT, args.attempt, "attempt");
  checkValue(TOKEN, args.nativeSessionId, "native_session_id");
  checkValue(HARNESS_NAME, adapter.name, "harness.name");
  const version = args.harnessVersion ?? null;
  if (version !== null) checkValue(HARNESS_VERSION, version, "harness.version");
  const decidedAttempt = args.decidedAttempt ?? null;
  if (decidedAttempt !== null) checkValue(ATTEMPT, decidedAttempt, "decided_attempt");
  if (args.eventId !== undefined) checkValue(TOKEN, args.eventId, "event_id");
  encodeChecked(GET_REQUEST, { session: args.session }, LIMITS.requestBytes);
  const info: HarnessInfo = { name: adapter.name, version };
  const { failure_class: failureClass, rule } = adapter.assess(outcome);
  if (failureClass === null) {
    if (decidedAttempt === null) return new NotAFailure(rule);
    const sent = await runner.reportTurnCompleted({
      runId: args.runId,
      attempt: decidedAttempt,
      session: args.session,
      nativeSessionId: args.nativeSessionId,
      harness: info,
      eventId: args.eventId,
      traceparent: args.traceparent,
    });
    return new NotAFailure(rule, sent);
  }
  const presence = args.probeFirst === false ? null : await adapter.probe(args.nativeSessionId, { cwd: args.cwd, env: args.env });
  const traceparent = args.traceparent;
  if (presence === "absent") {
    const reply = await runner.reject(args.session, args.nativeSessionId, "resume_target_missing", { traceparent });
    return new Rejected(failureClass, rule, reply.cleared);
  }
  const commandResult = runner.signCommandResult({
    runId: args.runId,
    attempt: args.attempt,
    command: args.command ?? `${adapter.name}.resume`,
    status: FAILED_STATUS,
    classification: failureClass === "unclassified" ? null : failureClass,
  });
  const eventId = await runner.reportResumeFailure({
    runId: args.runId,
    attempt: args.attempt,
    session: args.session,
    nativeSessionId: args.nativeSessionId,
    commandResult,
    pendingToolCall: args.pendingToolCall,
    governedWaitElapsed: args.governedWaitElapsed,
    eventId: args.eventId,
    harness: info,
    traceparent,
  });
  return new Reported(eventId, failureClass, rule, presence);
}
