/** The runner's side of contract v1: session requests, events, decisions and the archive move. */

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import {
  connect as natsConnect,
  headers as natsHeaders,
  Match,
  NoRespondersError,
  RequestError,
  TimeoutError,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  type Subscription,
} from "@nats-io/transport-node";
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  JetStreamApiCodes,
  JetStreamApiError,
  PubHeaders,
  type Consumer,
  type ConsumerInfo,
  type ConsumerMessages,
  type JetStreamClient,
  type JsMsg,
} from "@nats-io/jetstream";
import {
  archiveAnswer,
  ATTEMPT,
  checkValue,
  CLAIM_REQUEST,
  COMMAND_RESULT,
  COMMIT_REQUEST,
  DECIDE_REQUEST,
  encodeChecked,
  GET_REQUEST,
  LIMITS,
  REJECT_REQUEST,
  RESUME_FAILED,
  TOKEN,
  TURN_COMPLETED,
  type Rule,
} from "./checks.js";
import {
  nowRfc3339,
  TURN_COMMAND,
  TURN_STATUS,
  type ArchiveRequest,
  type ArchiveResult,
  type CommandResult,
  type CommitArgs,
  type CommitReply,
  type DecideArgs,
  type DecideReply,
  type Decision,
  type ErrorInfo,
  type HarnessInfo,
  type OwnershipReply,
  type Refusal,
  type RejectCode,
  type RejectReply,
  type SessionRef,
  type SessionView,
  type ToolCall,
} from "./contract.js";
import { denied, Denials, permissionViolation } from "./denials.js";
import { ContinuityError, errorFor, InvalidRequest, NotFound, RequestTimeout, Unavailable } from "./errors.js";
import type { Adapter } from "./harness/adapter.js";
import { onTheWire } from "./harness/compatibility.js";
import type { Outcome } from "./harness/match.js";
import { recover, type RecoverArgs, type Verdict } from "./harness/recover.js";
import { natsOptions, settingsOf, type ConnectOptions, type Settings } from "./options.js";
import { sign } from "./signing.js";
import { checkTraceparent, childTraceparent, isTraceparent, newTraceparent, TRACEPARENT_HEADER } from "./tracing.js";

export const DECISIONS_STREAM = "CONTINUITY_DECISIONS";
export const EVENTS_STREAM = "CONTINUITY_EVENTS";

export type SessionOp = "decide" | "commit" | "get" | "reject" | "claim";

export const subjects = {
  /** `continuity.sessions.<runnerId>.<op>` (contract 10.1): the services act for the runner named
   * there, never for one named in a body. */
  sessions: (runnerId: string, op: SessionOp) => `continuity.sessions.${runnerId}.${op}`,
  event: (runnerId: string, type: string) => `continuity.events.${runnerId}.${type}`,
  decisions: (runnerId: string) => `continuity.decisions.${runnerId}`,
  archive: (runnerId: string) => `continuity.runner.${runnerId}.archive`,
  /** The pull request of the runner's consumer (a fetch). */
  decisionsNext: (runnerId: string) => `$JS.API.CONSUMER.MSG.NEXT.${DECISIONS_STREAM}.${runnerId}`,
};

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** How many of its latest reports a runner keeps, so that `reportAgain` can send one the
 * classifier refused for its quota, and `resend` one whose decision has not come. */
export const REPORTS_KEPT = 1024;
/** The longest single timer node allows (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** The least time given to creating the decisions consumer: a one-off control request, which a
 * server that has just restarted was seen to take over a second to answer; a short
 * `requestTimeout`, meant for publications and session requests, does not bound it. */
const CONSUMER_CREATE_TIMEOUT_MS = 5_000;

/** A call's own trace context: the W3C `traceparent` its message carries, ahead of the
 * `traceContext` hook's (refused with `InvalidRequest`, field `traceparent`, when not valid). */
export interface TraceOptions {
  traceparent?: string;
}

/** The trace context a message from the services came with: its `traceparent` header when it
 * is a valid W3C traceparent, else undefined (a malformed or hostile header is never passed on).
 * Continue the trace from it (`childTraceparent`, or your tracer's `propagation.extract`). */
export interface TraceContext {
  readonly traceparent?: string;
}

export interface ResumeFailureArgs extends TraceOptions {
  runId: string;
  attempt: number;
  session: SessionRef;
  nativeSessionId: string;
  error?: ErrorInfo | null;
  commandResult?: CommandResult | null;
  pendingToolCall?: ToolCall | null;
  governedWaitElapsed?: boolean;
  /** Generated when absent; give the same id to re-send the same event. */
  eventId?: string;
  /** The harness the session lives in (contract 4.6): the decision's outcomes are grouped by it. */
  harness?: HarnessInfo | null;
}

/** `reportTurnCompleted` (contract 4.6). */
export interface TurnCompletedArgs extends TraceOptions {
  runId: string;
  /** The attempt of the decision the turn follows: the decision's own `attempt`. */
  attempt: number;
  session: SessionRef;
  /** The session that completed the turn: the resumed one after `retry_same_session`, the
   * replacement after `open_replacement`, the fresh one after `continue_fresh`. */
  nativeSessionId: string;
  /** The harness the session lives in (`{ name: "claude-code", version: "2.1.332" }`). */
  harness?: HarnessInfo | null;
  /** Generated when absent; give the same id to re-send the same event. */
  eventId?: string;
}

/** The events a runner sends, the last token of their subject. */
type EventType = "resume_failed" | "turn_completed";
const EVENT_RULES: Record<EventType, Rule> = { resume_failed: RESUME_FAILED, turn_completed: TURN_COMPLETED };

/** A report as sent: its type and its encoded bytes. */
interface Sent {
  type: EventType;
  data: Uint8Array;
}

export interface SignArgs {
  runId: string;
  attempt: number;
  command: string;
  status: string;
  /** Default null. */
  classification?: string | null;
  /** Default: now. */
  issuedAt?: string;
}

/** Decision ids a runner remembers as acknowledged (the latest ones): a copy of one comes within
 * the consumer's ack wait (an acknowledgement lost), or soon after a recovery (the same decision
 * stored again outside the stream's duplicate window). */
const ACKNOWLEDGED_KEPT = 4096;

/** The decision ids a runner acknowledged, the latest `limit` of them (a Map keeps their order). */
class Acknowledged {
  private readonly ids = new Map<string, true>();

  constructor(private readonly limit: number = ACKNOWLEDGED_KEPT) {}

  has(decisionId: string): boolean {
    return this.ids.has(decisionId);
  }

  add(decisionId: string): void {
    this.ids.delete(decisionId);
    this.ids.set(decisionId, true);
    if (this.ids.size > this.limit) {
      const oldest = this.ids.keys().next();
      if (oldest.done !== true) this.ids.delete(oldest.value);
    }
  }
}

/**
 * One message as delivered by the runner's durable consumer: a decision, or the refusal of one of
 * the runner's events (contract 10.5), in the order they were published. `message.type` tells
 * them apart; `decision` and `refusal` are the one it is, the other null. A decision once
 * acknowledged (`ack`) is not delivered again: a copy of it is acknowledged and skipped.
 */
export class Delivery {
  constructor(
    readonly message: Decision | Refusal,
    private readonly msg: JsMsg,
    private readonly nakDelayMs: number,
    private readonly acknowledged: Acknowledged | null = null,
  ) {}

  get decision(): Decision | null {
    return this.message.type === "decision" ? this.message : null;
  }

  get refusal(): Refusal | null {
    return this.message.type === "refusal" ? this.message : null;
  }

  /** The `traceparent` the services published this message with, when it is a valid one. */
  get traceparent(): string | undefined {
    return traceparentOf(() => this.msg.headers);
  }

  /** How many times JetStream has delivered this decision (1 the first time). */
  get deliveryCount(): number {
    return this.msg.info.deliveryCount;
  }

  get redelivered(): boolean {
    return this.msg.redelivered;
  }

  /** Done with it: it is not delivered again. */
  ack(): void {
    // Remembered first: the runner acted on it, so a copy is one even if this ack is lost.
    if (this.message.type === "decision") this.acknowledged?.add(this.message.decision_id);
    this.msg.ack();
  }

  /** Not handled: delivered again after `delaySeconds` (default: the runner's `nakDelay`). */
  nak(delaySeconds?: number): void {
    this.msg.nak(delaySeconds === undefined ? this.nakDelayMs : delaySeconds * 1000);
  }

  /** Still working on it: restarts JetStream's acknowledgement timer. */
  working(): void {
    this.msg.working();
  }
}

/** `context.traceparent`: the delivery's (see `TraceContext`). */
export type DecisionHandler = (decision: Decision, context: TraceContext) => unknown | Promise<unknown>;
export type RefusalHandler = (refusal: Refusal, context: TraceContext) => unknown | Promise<unknown>;

export interface HandleOptions {
  /** Runs for each refusal of the runner's events, as `handler` does for decisions. Without it a
   * refusal is acknowledged with a process warning (`ContinuityRefusal`), and the runner never
   * learns that its report got no decision: pass one (with `quota_exceeded`, `reportAgain`). */
  onRefusal?: RefusalHandler;
}
/** `context.traceparent`: the archiver's request's (see `TraceContext`). */
export type ArchiveHandler = (request: ArchiveRequest, context: TraceContext) => ArchiveResult | Promise<ArchiveResult>;

export class Runner {
  readonly runnerId: string;
  private readonly js: JetStreamClient;
  private readonly denials: Denials;
  private readonly active = new Set<ConsumerMessages>();
  private readonly subscriptions = new Set<Subscription>();
  /** The latest reports by event id, encoded as sent (for `reportAgain` and `resend`). */
  private readonly reported = new Map<string, Sent>();
  /** Decisions acknowledged through `Delivery.ack`: a copy of one is not delivered again. */
  private readonly acknowledged = new Acknowledged();
  private closing = false;
  private sentTraceparent: string | null = null;

  constructor(
    readonly nc: NatsConnection,
    private readonly settings: Settings,
  ) {
    this.runnerId = settings.runnerId;
    this.js = jetstream(nc, { timeout: settings.requestTimeoutMs });
    this.denials = new Denials(nc);
  }

  /**
   * The `traceparent` of the latest request or event this runner sent (or began to send: a
   * request that timed out had it too), null before the first. After `await
   * runner.reportResumeFailure(...)` with nothing else sending meanwhile it is the report's, and
   * the services' spans for it are in its trace. Calls made concurrently overwrite it: give each
   * its own `traceparent` instead. Archive answers do not change it.
   */
  get lastTraceparent(): string | null {
    return this.sentTraceparent;
  }

  // ---- session-store requests (contract 3 and 10) ----------------------------------------------

  // Each request is checked against the contract before it is sent (`InvalidRequest`, naming the
  // field), as the session-store checks it: see checks.ts. Each goes to
  // `continuity.sessions.<runnerId>.<op>`; a session outside the runner's tenants, or owned by
  // another runner, is answered as one that does not exist (contract 10.2, 10.3). Each carries a
  // `traceparent` header: the call's own (`traceparent` in its arguments or its trailing
  // options), else the `traceContext` hook's, else a new trace's (`lastTraceparent` tells).

  /** Whether to resume the saved session or start fresh, asked at the provider's `ready` frame. A
   * session the runner may not see is `fresh` with `no_session`. */
  async decide(args: DecideArgs & TraceOptions): Promise<DecideReply> {
    optionalTraceparent(args.traceparent);
    const ready = onTheWire(args.readyComponents, args.readyGeneration, "ready_components", "ready_generation");
    const body = encodeChecked(DECIDE_REQUEST, {
      session: args.session,
      adapter: args.adapter,
      model: args.model,
      cwd: args.cwd,
      latest_cursor: args.latestCursor,
      compatibility: args.compatibility,
      ready_generation: ready.generation,
      ready_components: ready.digests,
    }, LIMITS.requestBytes);
    const reply = await this.request<DecideReply>(subjects.sessions(this.runnerId, "decide"), body, args.traceparent);
    // Services of an earlier release explain nothing: the explanation's fields read as unknown.
    return {
      ...reply,
      rule: reply.rule ?? null,
      policy: reply.policy ?? null,
      generation: reply.generation ?? "not_compared",
      declaration: reply.declaration ?? null,
      changed_components: reply.changed_components ?? null,
    };
  }

  /**
   * Saves the session after a turn (or a validated cancellation); the first commit binds the session
   * to this runner. `RevisionConflict`, `StaleEpoch`, `SessionHeld` or `SessionNotOwned` (another
   * runner of the tenant owns it) when nothing was written; `NotFound` outside the runner's tenants.
   */
  async commit(args: CommitArgs & TraceOptions): Promise<CommitReply> {
    optionalTraceparent(args.traceparent);
    const saved = onTheWire(
      args.compatibilityComponents,
      args.compatibilityGeneration,
      "compatibility_components",
      "compatibility_generation",
    );
    const body = encodeChecked(COMMIT_REQUEST, {
      session: args.session,
      native_session_id: args.nativeSessionId,
      adapter: args.adapter,
      model: args.model,
      cwd: args.cwd,
      checkpoint_policy: args.checkpointPolicy,
      cursor: args.cursor,
      prompt_hash: args.promptHash,
      compatibility_generation: saved.generation,
      expected_revision: args.expectedRevision,
      epoch: args.epoch,
      cancelled: args.cancelled,
      compatibility_components: saved.digests,
    }, LIMITS.requestBytes);
    return this.request<CommitReply>(subjects.sessions(this.runnerId, "commit"), body, args.traceparent);
  }

  /** The resume target is missing or corrupt: the next decision reseeds with the full transcript. */
  async reject(
    session: SessionRef,
    nativeSessionId: string,
    code: RejectCode,
    options: TraceOptions = {},
  ): Promise<RejectReply> {
    optionalTraceparent(options.traceparent);
    const body = encodeChecked(REJECT_REQUEST, { session, native_session_id: nativeSessionId, code }, LIMITS.requestBytes);
    return this.request<RejectReply>(subjects.sessions(this.runnerId, "reject"), body, options.traceparent);
  }

  /** The saved record, without secrets; `NotFound` when there is none, or the runner may not see it. */
  async get(session: SessionRef, options: TraceOptions = {}): Promise<SessionView> {
    optionalTraceparent(options.traceparent);
    const body = encodeChecked(GET_REQUEST, { session }, LIMITS.requestBytes);
    return this.request<SessionView>(subjects.sessions(this.runnerId, "get"), body, options.traceparent);
  }

  /**
   * Takes over a session of the runner's tenant that another runner owns (a runner pool whose task
   * moved host): its epoch and revision go up by one, fencing the previous owner; commit afterwards
   * with the reply's `epoch`. `ClaimRefused` unless the services allow claims
   * (`CONTINUITY_SESSION_CLAIMS=allow`), `SessionHeld` for a held session (an operator transfers
   * it), `NotFound` without a record or outside the runner's tenants. The owner's claim changes
   * nothing.
   */
  async claim(session: SessionRef, options: TraceOptions = {}): Promise<OwnershipReply> {
    optionalTraceparent(options.traceparent);
    const body = encodeChecked(CLAIM_REQUEST, { session }, LIMITS.requestBytes);
    return this.request<OwnershipReply>(subjects.sessions(this.runnerId, "claim"), body, options.traceparent);
  }

  /** `given` (checked by the caller), else the `traceContext` hook's value when it is a valid
   * traceparent, else a new trace's root. A hook that throws or answers anything else is ignored:
   * a tracer's bug must not stop a recovery. */
  private traceparentFor(given: string | undefined): string {
    return given ?? this.hooked() ?? newTraceparent();
  }

  /** The `traceContext` hook's value when it is a valid traceparent, else undefined. */
  private hooked(): string | undefined {
    const hook = this.settings.traceContext;
    if (hook === null) return undefined;
    try {
      const value = hook();
      return isTraceparent(value) ? value : undefined;
    } catch {
      return undefined; // ignored, as an invalid value is
    }
  }

  /**
   * Refuses, sending nothing, a message the server would refuse for its size: the server counts
   * the header block into `max_payload` (1 MiB unless configured), so a body within the
   * contract's 64 KiB limit may still not fit one set lower. (The client would throw, and an
   * event be retried for nothing; the services measure the body alone against the contract's
   * limit, which `encodeChecked` has checked.)
   */
  private checkFits(data: Uint8Array, headers: MsgHdrs): void {
    const limit = this.nc.info?.max_payload;
    const size = data.length + headerBytes(headers);
    if (limit !== undefined && size > limit) {
      const why = `the message with its headers (${size} bytes) is larger than the server's max_payload of ${limit} bytes`;
      throw new InvalidRequest(400, "payload_too_large", why);
    }
  }

  private async request<R>(subject: string, body: Uint8Array, traceparent: string | undefined): Promise<R> {
    const headers = natsHeaders();
    headers.set(TRACEPARENT_HEADER, this.traceparentFor(traceparent));
    this.checkFits(body, headers);
    this.sentTraceparent = headers.get(TRACEPARENT_HEADER);
    let reply: Msg;
    try {
      reply = await this.nc.request(subject, body, { timeout: this.settings.requestTimeoutMs, headers });
    } catch (err) {
      throw requestFailure(subject, err);
    }
    const status = reply.headers?.get("Nats-Service-Error-Code");
    if (status) {
      let code = "unknown";
      let message = reply.headers?.get("Nats-Service-Error") ?? "";
      try {
        const parsed = JSON.parse(decoder.decode(reply.data)) as { error?: { code?: unknown; message?: unknown } };
        if (typeof parsed.error?.code === "string") code = parsed.error.code;
        if (typeof parsed.error?.message === "string") message = parsed.error.message;
      } catch {
        // an error reply without a body keeps the header's text
      }
      throw errorFor(Number(status), code, message);
    }
    try {
      return JSON.parse(decoder.decode(reply.data)) as R;
    } catch {
      throw new ContinuityError(502, "malformed_reply", `the reply on ${subject} is not JSON`);
    }
  }

  // ---- events (contract 4.1, 4.2) --------------------------------------------------------------

  /**
   * A command result signed with this runner's key (HMAC-SHA256 of the contract 4.2 lines), for
   * the event of `runId` and `attempt`; checked as the event will be (`InvalidRequest`).
   */
  signCommandResult(args: SignArgs): CommandResult {
    checkValue(TOKEN, args.runId, "run_id");
    checkValue(ATTEMPT, args.attempt, "attempt");
    const keyId = this.settings.signingKeyId;
    const key = keyId === null ? undefined : this.settings.signingKeys[keyId];
    if (keyId === null || key === undefined) {
      const option = Object.keys(this.settings.signingKeys).length === 0 ? "signingKeys" : "signingKeyId";
      const why = "no signing key (set signingKeys, and signingKeyId when there are several)";
      throw new InvalidRequest(400, "invalid_field", `${option}: ${why}`, option);
    }
    const fields = {
      command: args.command,
      status: args.status,
      classification: args.classification ?? null,
      issued_at: args.issuedAt ?? nowRfc3339(),
    };
    // Checked before signing: the signature is computed over these strings.
    encodeChecked(COMMAND_RESULT, { ...fields, key_id: keyId, signature: "" }, LIMITS.eventBytes, "command_result");
    return { ...fields, key_id: keyId, signature: sign(key, this.runnerId, args.runId, args.attempt, fields) };
  }

  /**
   * Publishes a `resume_failed` event with `Nats-Msg-Id` = its event id, retrying with the same id
   * (so that the stream keeps it once) until acknowledged, within `publishAttempts` and
   * `publishDeadline`. Returns the event id; `lastTraceparent` is then the event's `traceparent`
   * (`args.traceparent`, else the `traceContext` hook's, else a new trace's), the same on every
   * retry.
   */
  async reportResumeFailure(args: ResumeFailureArgs): Promise<string> {
    optionalTraceparent(args.traceparent);
    const eventId = args.eventId ?? `evt-${randomUUID()}`;
    // The classifier only dead-letters an event that breaks the contract: refused here instead.
    const data = encodeChecked(RESUME_FAILED, {
      type: "resume_failed",
      event_id: eventId,
      runner_id: this.runnerId,
      run_id: args.runId,
      attempt: args.attempt,
      session: args.session,
      native_session_id: args.nativeSessionId,
      occurred_at: nowRfc3339(),
      error: args.error,
      command_result: args.commandResult,
      pending_tool_call: args.pendingToolCall,
      governed_wait_elapsed: args.governedWaitElapsed,
      harness: args.harness,
    }, LIMITS.eventBytes);
    return this.report(eventId, { type: "resume_failed", data }, args.traceparent);
  }

  /**
   * Publishes a `turn_completed` event (contract 4.6) and returns its event id: the session of a
   * decided attempt completed a turn, so the decision worked. `attempt` is the attempt of the
   * decision the turn follows (the decision's own `attempt`, which is its `resume_failed`'s). Send
   * it once, after the first turn that completes after the decision; the services record one
   * outcome per `(run_id, attempt)`, so sending it again changes nothing. The event carries a
   * result signed with the runner's key (`signCommandResult`: command `turn`, status `completed`,
   * no classification). It is checked against the contract first (`InvalidRequest`, nothing
   * sent), then published and retried as `reportResumeFailure`'s event is; `resend` and
   * `reportAgain` take it too.
   */
  async reportTurnCompleted(args: TurnCompletedArgs): Promise<string> {
    optionalTraceparent(args.traceparent);
    const eventId = args.eventId ?? `evt-${randomUUID()}`;
    const result = this.signCommandResult({
      runId: args.runId,
      attempt: args.attempt,
      command: TURN_COMMAND,
      status: TURN_STATUS,
    });
    const data = encodeChecked(TURN_COMPLETED, {
      type: "turn_completed",
      event_id: eventId,
      runner_id: this.runnerId,
      run_id: args.runId,
      attempt: args.attempt,
      session: args.session,
      native_session_id: args.nativeSessionId,
      occurred_at: nowRfc3339(),
      result,
      harness: args.harness,
    }, LIMITS.eventBytes);
    return this.report(eventId, { type: "turn_completed", data }, args.traceparent);
  }

  /**
   * Sends the report that `refusal` refused for its quota again, with a new event id, at
   * `not_before` (waiting until then), and returns the new event id (contract 10.5, 10.6). Only a
   * `quota_exceeded` refusal may be sent again (`InvalidRequest`, field `code`: every other code is
   * final). The report must be one of the last `REPORTS_KEPT` this runner made since it connected
   * (`NotFound` otherwise: report it again with the same arguments). For `quota` `event_rate` the
   * wait is seconds at most; for `stored_runs` it lasts until the oldest run leaves the run
   * retention, which may be days: a runner may rather stop the run then. The report sent again
   * carries `options.traceparent`, else the hook's (asked when it is sent), else a new trace's
   * (`lastTraceparent`).
   */
  async reportAgain(refusal: Refusal, options: TraceOptions = {}): Promise<string> {
    optionalTraceparent(options.traceparent);
    if (refusal.code !== "quota_exceeded") {
      const why = `a ${refusal.code} refusal is final: only quota_exceeded is sent again`;
      throw new InvalidRequest(400, "invalid_field", why, "code");
    }
    const sent = this.reported.get(refusal.event_id);
    if (sent === undefined) throw new NotFound(404, "not_found", "the refused report is not one this runner still keeps");
    await untilTime(refusal.not_before);
    return this.sendAgain(refusal.event_id, sent, options.traceparent);
  }

  /**
   * Sends a report whose decision has not come again, now, under a new event id, and returns the
   * new event id (contract 9.13). A stream can lose an acknowledged message, or its consumer pass
   * over one, under a network partition (docs/protocol.md, "Under partitions"), and the runner is
   * the one party that knows what it sent: a runner that has had neither a decision nor a refusal
   * for a report within its own bound sends it again. The classifier decides once per run and
   * attempt (contract 4.5), so this is always safe: a report decided meanwhile gets no second
   * decision. The report must be one of the last `REPORTS_KEPT` this runner made since it
   * connected (`NotFound` otherwise: report it again with `reportResumeFailure` and the same
   * arguments). Its trace context is chosen as `reportAgain`'s is.
   */
  async resend(eventId: string, options: TraceOptions = {}): Promise<string> {
    optionalTraceparent(options.traceparent);
    const sent = this.reported.get(eventId);
    if (sent === undefined) throw new NotFound(404, "not_found", "the report is not one this runner still keeps");
    return this.sendAgain(eventId, sent, options.traceparent);
  }

  /** `sent`, the report kept as `eventId`, sent again under a new event id, kept instead of it
   * once acknowledged. */
  private async sendAgain(eventId: string, sent: Sent, traceparent: string | undefined): Promise<string> {
    // The same report: the failure, its time and its signed result; only the id is new (the old
    // one would be dropped by the stream as a duplicate within its window).
    const newId = `evt-${randomUUID()}`;
    const event = { ...(JSON.parse(decoder.decode(sent.data)) as Record<string, unknown>), event_id: newId };
    const data = encodeChecked(EVENT_RULES[sent.type], event, LIMITS.eventBytes);
    await this.report(newId, { type: sent.type, data }, traceparent);
    // Forgotten only once the new one is acknowledged: a failed publication can be retried.
    this.reported.delete(eventId);
    return newId;
  }

  private async report(eventId: string, sent: Sent, traceparent: string | undefined): Promise<string> {
    await this.publishOnce(subjects.event(this.runnerId, sent.type), eventId, sent.data, traceparent);
    this.reported.set(eventId, sent);
    for (const oldest of this.reported.keys()) {
      if (this.reported.size <= REPORTS_KEPT) break;
      this.reported.delete(oldest);
    }
    return eventId;
  }

  private async publishOnce(subject: string, msgId: string, data: Uint8Array, traceparent: string | undefined): Promise<void> {
    const { publishAttempts, publishDeadlineMs, requestTimeoutMs } = this.settings;
    // Every header the client will send, so that the size checked is the size sent; one trace
    // context for every retry of the same message.
    const headers = natsHeaders();
    headers.set(TRACEPARENT_HEADER, this.traceparentFor(traceparent));
    headers.set(PubHeaders.MsgIdHdr, msgId);
    headers.set(PubHeaders.ExpectedStreamHdr, EVENTS_STREAM);
    this.checkFits(data, headers);
    this.sentTraceparent = headers.get(TRACEPARENT_HEADER);
    const deadline = Date.now() + publishDeadlineMs;
    let backoff = 200;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.js.publish(subject, data, {
          headers,
          msgID: msgId,
          timeout: Math.max(1, Math.min(requestTimeoutMs, deadline - Date.now())),
          expect: { streamName: EVENTS_STREAM },
        });
        return;
      } catch (err) {
        const violation = permissionViolation(err);
        if (violation !== null) throw denied(violation); // sending it again would be refused again
        const error = err instanceof Error ? err : new Error(String(err));
        if (this.closing || attempt >= publishAttempts || Date.now() + backoff >= deadline) {
          throw new Unavailable(503, "unavailable", `the event was not acknowledged after ${attempt} publishes`);
        }
        this.settings.onPublishRetry?.(msgId, attempt, error);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 2000);
      }
    }
  }

  // ---- harness adapters -------------------------------------------------------------------------

  /**
   * What a resume of `adapter`'s harness left (`outcome`), told to Continuity in one call, with
   * exactly one verdict (`kind`):
   * - `not_a_failure`: the harness's rule says the resume did not fail: its turn completed.
   *   Nothing is sent, unless `decidedAttempt` (the attempt of the decision this resume followed)
   *   is given: then a `turn_completed` for that attempt is published (`reportTurnCompleted`,
   *   contract 4.6) and `reported_event_id` is its event id.
   * - `rejected`: a failure, and the probe finds the session absent from this host (or
   *   `nativeSessionId` is not one of the harness's ids): the saved handle is rejected (contract
   *   3.4, `resume_target_missing`), so the next `decide` starts fresh with the full transcript.
   * - `reported`: a failure otherwise: a `resume_failed` with a command result signed with the
   *   class (`classification` null for `unclassified`); the decision comes on the decisions
   *   subject.
   * Both events name the harness: `{ name: adapter.name, version: harnessVersion }`.
   * `InvalidRequest` for an outcome that is not one, or is larger than 4 MiB in all; no signing
   * key is an `InvalidRequest` too (field `signingKeys`), before anything is sent.
   */
  async recover(adapter: Adapter, outcome: Outcome, args: RecoverArgs): Promise<Verdict> {
    return recover(this, adapter, outcome, args);
  }

  // ---- decisions (contract 4.5) and refusals (10.5) --------------------------------------------

  /**
   * The runner's decisions and the refusals of its events (`Delivery.message`), from its durable
   * pull consumer `<runnerId>` on `CONTINUITY_DECISIONS`.
   * With `createConsumer` (the default) it is looked up and bound, created (filtered to this
   * runner) only when missing, and bound as it is when the lookup is refused; with
   * `createConsumer: false` it is bound without any JetStream API call. Throws `PermissionDenied`
   * as soon as the server refuses the fetch. Each delivery must be acknowledged (`ack`) or given
   * back (`nak`). A decision this runner acknowledged is delivered once: a copy (a redelivery after
   * its acknowledgement was lost, or the same `decision_id` stored again) is acknowledged and
   * skipped. A message that is neither a decision nor a refusal is terminated and skipped.
   */
  async *decisions(): AsyncGenerator<Delivery> {
    const { consumer, bound } = await this.bindDecisions();
    const state: { refused: ContinuityError | null; messages: ConsumerMessages | null } = {
      refused: null,
      messages: null,
    };
    // A refused fetch is a publication without a reply: without this the loop would wait forever.
    const unwatch = this.denials.watch(subjects.decisionsNext(this.runnerId), (error) => {
      state.refused = error;
      state.messages?.stop();
    });
    try {
      // `bind`: no consumer lookups after missed heartbeats either.
      state.messages = await consumer.consume({ max_messages: 64, bind: bound });
      yield* this.deliveries(state.messages);
    } catch (err) {
      const violation = permissionViolation(err);
      throw violation === null ? err : denied(violation);
    } finally {
      unwatch();
    }
    if (state.refused !== null) throw state.refused;
  }

  private async *deliveries(messages: ConsumerMessages): AsyncGenerator<Delivery> {
    this.active.add(messages);
    try {
      for await (const msg of messages) {
        const message = parseMessage(msg.data);
        if (message === null) {
          msg.term(); // neither a decision nor a refusal: never deliver it again
          continue;
        }
        if (message.type === "decision" && this.acknowledged.has(message.decision_id)) {
          msg.ack(); // a copy of a decision acted on (its ack lost, or stored twice): once
          continue;
        }
        yield new Delivery(message, msg, this.settings.nakDelayMs, this.acknowledged);
      }
    } finally {
      this.active.delete(messages);
      await messages.close().catch(() => undefined);
    }
  }

  /**
   * Runs `handler` for each decision and `options.onRefusal` for each refusal of the runner's
   * events, one at a time in the order published: acknowledged when it returns, given back
   * (redelivered after `nakDelay`) when it raises. Resolves when the runner closes.
   */
  async handleDecisions(handler: DecisionHandler, options: HandleOptions = {}): Promise<void> {
    for await (const delivery of this.decisions()) {
      // Long handlers (waiting for not_before) keep the delivery from being redelivered meanwhile.
      const keepAlive = setInterval(() => delivery.working(), Math.max(100, this.settings.ackWaitMs / 3));
      try {
        const message = delivery.message;
        const context: TraceContext = { traceparent: delivery.traceparent };
        if (message.type === "decision") await handler(message, context);
        else if (options.onRefusal !== undefined) await options.onRefusal(message, context);
        else {
          const { run_id, attempt, event_id, code } = message;
          process.emitWarning(`event ${event_id} of run ${run_id} attempt ${attempt} refused: ${code}`, "ContinuityRefusal");
        }
        delivery.ack();
      } catch {
        delivery.nak();
      } finally {
        clearInterval(keepAlive);
      }
    }
  }

  private async bindDecisions(): Promise<{ consumer: Consumer; bound: boolean }> {
    const name = this.runnerId;
    if (!this.settings.createConsumer) return { consumer: this.boundConsumer(), bound: true };
    try {
      return { consumer: await this.js.consumers.get(DECISIONS_STREAM, name), bound: false };
    } catch (err) {
      // Not permitted to look it up (the shipped authorization): an operator created it.
      if (permissionViolation(err) !== null) return { consumer: this.boundConsumer(), bound: true };
      if (!(err instanceof JetStreamApiError) || err.code !== JetStreamApiCodes.ConsumerNotFound) throw err;
    }
    const timeout = Math.max(this.settings.requestTimeoutMs, CONSUMER_CREATE_TIMEOUT_MS);
    const jsm = await jetstreamManager(this.nc, { checkAPI: false, timeout });
    // Creating with the same configuration is idempotent, so two processes may race here.
    try {
      await jsm.consumers.add(DECISIONS_STREAM, {
        durable_name: name,
        name,
        filter_subject: subjects.decisions(name),
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ack_wait: this.settings.ackWaitMs * 1_000_000, // nanoseconds
      });
    } catch (err) {
      if (permissionViolation(err) === null) throw err;
      throw new NotFound(404, "not_found", `no consumer ${name} on ${DECISIONS_STREAM}, and not permitted to create it`);
    }
    return { consumer: await this.js.consumers.get(DECISIONS_STREAM, name), bound: false };
  }

  /** The consumer `<runnerId>` as the operator creates it, bound without asking the server. */
  private boundConsumer(): Consumer {
    const name = this.runnerId;
    // Only the stream and the consumer's name are used to fetch; the rest documents what it is.
    const info = {
      stream_name: DECISIONS_STREAM,
      name,
      config: {
        name,
        durable_name: name,
        filter_subject: subjects.decisions(name),
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
      },
    } as unknown as ConsumerInfo;
    return this.js.consumers.getConsumerFromInfo(info);
  }

  // ---- the archive move (contract 5.1) ---------------------------------------------------------

  /**
   * Answers the archiver's remote move on `continuity.runner.<runnerId>.archive`. A handler that
   * raises answers exit code 1 with an output that does not repeat the error. The handler's
   * second argument carries the request's `traceparent` (valid, else undefined). The answer's
   * `traceparent` is the `traceContext` hook's, else a child of the request's (the same trace),
   * else a new trace's.
   */
  serveArchive(handler: ArchiveHandler): Subscription {
    const sub = this.nc.subscribe(subjects.archive(this.runnerId), {
      callback: (err, msg) => {
        if (err) return;
        void this.answerArchive(handler, msg);
      },
    });
    this.subscriptions.add(sub);
    return sub;
  }

  private async answerArchive(handler: ArchiveHandler, msg: Msg): Promise<void> {
    let result: ArchiveResult;
    const request = parseArchiveRequest(msg.data);
    const traceparent = traceparentOf(() => msg.headers);
    if (request === null) {
      result = { exit_code: 2, timed_out: false, output: "invalid archive request" };
    } else {
      try {
        result = archiveAnswer(await handler(request, { traceparent }));
      } catch (err) {
        const kind = err instanceof Error ? err.name.replace(/[^A-Za-z0-9_]/g, "").slice(0, 64) : "error";
        result = { exit_code: 1, timed_out: false, output: `archive handler failed (${kind})` };
      }
    }
    const headers = natsHeaders();
    headers.set(TRACEPARENT_HEADER, this.archiveTraceparent(traceparent));
    try {
      msg.respond(encoder.encode(JSON.stringify(result)), { headers });
    } catch {
      // the connection closed meanwhile (or the answer is over a tiny max_payload): the archiver
      // counts a missing answer as a timeout
    }
  }

  /** The hook's trace context when it gives a valid one, else a span of the request's trace. */
  private archiveTraceparent(requested: string | undefined): string {
    return this.hooked() ?? (requested === undefined ? newTraceparent() : childTraceparent(requested));
  }

  // ---- life ------------------------------------------------------------------------------------

  /** Stops taking decisions and archive requests, lets what is in flight finish, then closes. */
  async drain(): Promise<void> {
    this.closing = true;
    for (const messages of this.active) messages.stop();
    if (!this.nc.isClosed()) await this.nc.drain();
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const messages of this.active) messages.stop();
    for (const sub of this.subscriptions) sub.unsubscribe();
    if (!this.nc.isClosed()) await this.nc.close();
  }

  /** Resolves when the connection is closed for good. */
  closed(): Promise<void> {
    return this.nc.closed().then(() => undefined);
  }
}

/** A message of the decisions subject as its `type` says (a decision of an earlier release may have
 * none, nor a `rule`: read as null), or null when it is neither a decision nor a refusal: a newer
 * kind is skipped, never mistaken for one. */
function parseMessage(data: Uint8Array): Decision | Refusal | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(decoder.decode(data));
  } catch {
    return null;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return null;
  const m = parsed as Record<string, unknown>;
  const kind = m.type ?? "decision";
  if (kind === "decision" && typeof m.decision_id === "string" && typeof m.run_id === "string") {
    return { ...m, type: "decision", rule: m.rule ?? null } as unknown as Decision;
  }
  if (kind === "refusal" && typeof m.event_id === "string" && typeof m.run_id === "string" && typeof m.code === "string") {
    return parsed as Refusal;
  }
  return null;
}

/** The size of the header block the client writes for `headers` (`NATS/1.0`, a `key: value` line
 * each, an empty line), which the server counts into the message's size. */
function headerBytes(headers: MsgHdrs): number {
  let size = encoder.encode("NATS/1.0\r\n\r\n").length;
  for (const key of headers.keys()) {
    for (const value of headers.values(key)) size += encoder.encode(`\r\n${key}: ${value}`).length;
  }
  return size;
}

/** A per-call `traceparent`: absent, or a valid one (`InvalidRequest` naming `traceparent`). */
function optionalTraceparent(value: unknown): void {
  if (value !== undefined) checkTraceparent(value);
}

/**
 * The message's one `traceparent` header (its name in any case) when it is a valid traceparent,
 * else undefined: a missing, repeated, malformed or hostile one, or a header block the client
 * cannot read, is never passed on nor thrown.
 */
function traceparentOf(read: () => MsgHdrs | undefined): string | undefined {
  try {
    const values = read()?.values(TRACEPARENT_HEADER, Match.IgnoreCase) ?? [];
    return values.length === 1 && isTraceparent(values[0]) ? values[0] : undefined;
  } catch {
    return undefined;
  }
}

/** Waits until `notBefore` (RFC 3339; null or unreadable: at once), in timers node can hold. */
async function untilTime(notBefore: string | null): Promise<void> {
  const at = notBefore === null ? Number.NaN : Date.parse(notBefore);
  for (let left = at - Date.now(); left > 0; left = at - Date.now()) {
    await sleep(Math.min(left, MAX_TIMER_MS)); // the contract's "at or after not_before"
  }
}

function parseArchiveRequest(data: Uint8Array): ArchiveRequest | null {
  try {
    const r = JSON.parse(decoder.decode(data)) as Partial<ArchiveRequest>;
    const s = r.session;
    if (
      typeof r.archive_id === "string" &&
      typeof r.run_id === "string" &&
      typeof r.native_session_id === "string" &&
      typeof s === "object" &&
      s !== null &&
      typeof s.tenant === "string" &&
      typeof s.conversation_id === "string" &&
      typeof s.agent_id === "string"
    ) {
      return {
        archive_id: r.archive_id,
        run_id: r.run_id,
        native_session_id: r.native_session_id,
        session: { tenant: s.tenant, conversation_id: s.conversation_id, agent_id: s.agent_id },
      };
    }
  } catch {
    // not JSON
  }
  return null;
}

function requestFailure(subject: string, err: unknown): ContinuityError {
  if (err instanceof ContinuityError) return err;
  const violation = permissionViolation(err);
  if (violation !== null) return denied(violation);
  const noResponders =
    err instanceof NoRespondersError ||
    (err instanceof RequestError && err.isNoResponders()) ||
    (err instanceof Error && err.cause instanceof NoRespondersError);
  if (noResponders) return new Unavailable(503, "unavailable", `no service answers ${subject}`);
  if (err instanceof TimeoutError || (err instanceof Error && err.cause instanceof TimeoutError)) {
    return new RequestTimeout(504, "timeout", `no answer on ${subject} in time`);
  }
  return new Unavailable(503, "unavailable", `the request on ${subject} failed: ${err instanceof Error ? err.name : "error"}`);
}

/**
 * Connects to NATS as `options.runnerId`. The first connection must be made within
 * `connectTimeout` seconds, else `Unavailable` (naming the error's kind, never a URL: it may hold
 * credentials); once made, the connection reconnects forever until closed.
 */
export async function connect(options: ConnectOptions): Promise<Runner> {
  const settings = settingsOf(options);
  const attempt = natsConnect(natsOptions(options, settings));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), settings.connectTimeoutMs);
  });
  let nc: NatsConnection | "late";
  try {
    // Each server is given its share of the time; this bounds them all together.
    nc = await Promise.race([attempt, late]);
  } catch (err) {
    throw new Unavailable(503, "unavailable", `no NATS server could be connected to (${errorKind(err)})`);
  } finally {
    clearTimeout(timer);
  }
  if (nc === "late") {
    // A connection made after all is closed at once; a failure has nobody to tell.
    attempt.then((c) => c.close()).catch(() => undefined);
    throw new Unavailable(503, "unavailable", `no NATS server could be connected to within ${settings.connectTimeoutMs / 1000}s`);
  }
  return new Runner(nc, settings);
}

/** An error's class name only: a NATS client's message can carry a server's URL. */
function errorKind(err: unknown): string {
  return err instanceof Error ? err.name.replace(/[^A-Za-z0-9_]/g, "").slice(0, 64) || "Error" : "error";
}
