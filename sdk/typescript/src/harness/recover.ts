/**
 * `runner.recover(adapter, outcome, args)`: from what a resume left to what Continuity is told,
 * in one call. The outcome is assessed with the harness's rules; a failure is reported as a
 * `resume_failed` carrying a command result signed with the class (so the classifier trusts it),
 * unless the probe finds the session absent from the host: then the saved handle is rejected
 * (contract 3.4, `resume_target_missing`), and the next `decide` starts fresh with the full
 * transcript.
 */

import { ATTEMPT, checkValue, encodeChecked, GET_REQUEST, LIMITS, TOKEN } from "../checks.js";
import type { SessionRef, ToolCall } from "../contract.js";
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
  /** Generated when absent; give the same id to re-send the same event. */
  eventId?: string;
}

/** The rule said the outcome is not a failure: nothing was sent. */
export class NotAFailure {
  readonly kind = "not_a_failure" as const;
  constructor(readonly rule: string) {}
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
  encodeChecked(GET_REQUEST, { session: args.session }, LIMITS.requestBytes);
  const { failure_class: failureClass, rule } = adapter.assess(outcome);
  if (failureClass === null) return new NotAFailure(rule);
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
    traceparent,
  });
  return new Reported(eventId, failureClass, rule, presence);
}
