/**
 * W3C trace context. The string functions on planted values, without servers; then, against a
 * NATS server and the four services, what the runner puts on the wire as a raw NATS connection of
 * the test overhears it (and as the events stream stores it): a `traceparent` header on every
 * session request and event, the call's own when given, else the `traceContext` hook's when it is
 * valid, else a new trace's; an invalid one of a call refused with nothing sent and its value not
 * repeated; a decision's and an archive request's header passed on only when valid. Last, under a
 * server with a small `max_payload`, the header block counted into the size, to the byte.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { connect as natsConnect, headers as natsHeaders, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node";
import {
  childTraceparent,
  ClaimRefused,
  connect,
  EVENTS_STREAM,
  InvalidRequest,
  isTraceparent,
  newTraceparent,
  subjects,
  traceIdOf,
  TRACEPARENT_HEADER,
  Unavailable,
  type ArchiveRequest,
  type CommitArgs,
  type ConnectOptions,
  type Delivery,
  type Refusal,
  type Runner,
  type SessionRef,
  type TraceContext,
} from "../src/index.js";
import { DECIDE_REQUEST, encodeChecked, LIMITS, RESUME_FAILED } from "../src/checks.js";
import { nonZeroHex } from "../src/tracing.js";
import { Observer } from "./support/inbox.js";
import { newSession, Stack, uniqueId, waitFor } from "./support/stack.js";

const VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/** A value a log must never show. */
const MARKER = "hunter2-sdkts";

/** Planted values that are not version-00 traceparents, named. */
const NOT_TRACEPARENTS: [string, unknown][] = [
  ["upper-case hex", VALID.toUpperCase()],
  ["an upper-case span id only", `00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01`],
  ["upper-case flags", `${VALID.slice(0, 53)}0A`],
  ["an all-zero trace id", `00-${"0".repeat(32)}-00f067aa0ba902b7-01`],
  ["an all-zero span id", `00-4bf92f3577b34da6a3ce929d0e0e4736-${"0".repeat(16)}-01`],
  ["version 01", `01${VALID.slice(2)}`],
  ["version ff", `ff${VALID.slice(2)}`],
  ["a later version's longer form", `${VALID}-${MARKER}`],
  ["one character too many", `${VALID}0`],
  ["one character too few", VALID.slice(0, 54)],
  ["a trailing newline", `${VALID}\n`],
  ["a leading space", ` ${VALID.slice(1)}`],
  ["a non-hex digit", `00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01`],
  ["underscores for dashes", VALID.replace(/-/g, "_")],
  ["a short trace id, a long span id", `00-4bf92f3577b34da6a3ce929d0e0e47-3600f067aa0ba902b7-01`],
  ["the empty string", ""],
  ["a secret", MARKER],
  ["undefined", undefined],
  ["null", null],
  ["a number", 42],
  ["an object", { traceparent: VALID }],
  ["an array", [VALID]],
  ["a String object", new String(VALID)],
  ["bytes", new TextEncoder().encode(VALID)],
];

/** The planted values a call is given, refused as its `traceparent`. */
const PLANTED = NOT_TRACEPARENTS.filter(([, value]) => value !== undefined);

function refusedTraceparent(value: unknown) {
  return (err: unknown) => {
    assert.ok(err instanceof InvalidRequest, `expected InvalidRequest, got ${String(err)}`);
    assert.deepEqual([err.status, err.code, err.field], [400, "invalid_field", "traceparent"]);
    if (typeof value === "string" && value.length > 0) assert.equal(err.message.includes(value), false, "the value is not repeated");
    assert.equal(err.message.includes(MARKER), false);
    return true;
  };
}

describe("trace context strings", () => {
  it("isTraceparent takes a version-00 traceparent and refuses planted bad ones", () => {
    const good = [VALID, `${VALID.slice(0, 53)}00`, `${VALID.slice(0, 53)}ff`, `00-${"0".repeat(31)}1-${"0".repeat(15)}1-01`];
    for (const value of good) assert.equal(isTraceparent(value), true, value);
    for (const [name, value] of NOT_TRACEPARENTS) assert.equal(isTraceparent(value), false, name);
  });

  it("newTraceparent draws a sampled root with random ids, new each time", () => {
    const traces = new Set<string>();
    const spans = new Set<string>();
    for (let i = 0; i < 500; i++) {
      const tp = newTraceparent();
      assert.equal(isTraceparent(tp), true, tp);
      assert.equal(tp.slice(0, 3), "00-");
      assert.equal(tp.slice(53), "01", "sampled");
      traces.add(traceIdOf(tp));
      spans.add(tp.slice(36, 52));
    }
    assert.equal(traces.size, 500);
    assert.equal(spans.size, 500);
  });

  it("draws an id again while the random bytes are all zeros", () => {
    const draws: Uint8Array[] = [new Uint8Array(8), new Uint8Array(8), Uint8Array.from([0, 0, 0, 0, 0, 0, 0, 1])];
    let calls = 0;
    const id = nonZeroHex(8, (size) => {
      assert.equal(size, 8);
      return draws[calls++]!;
    });
    assert.equal(id, "0000000000000001");
    assert.equal(calls, 3);
    assert.equal(nonZeroHex(16, () => Uint8Array.from({ length: 16 }, (_, i) => i)), "000102030405060708090a0b0c0d0e0f");
  });

  it("childTraceparent keeps the trace id and the flags, with a new span id", () => {
    for (const parent of [VALID, `${VALID.slice(0, 53)}00`, newTraceparent()]) {
      const spans = new Set<string>();
      for (let i = 0; i < 200; i++) {
        const child = childTraceparent(parent);
        assert.equal(isTraceparent(child), true, child);
        assert.equal(traceIdOf(child), traceIdOf(parent));
        assert.equal(child.slice(53), parent.slice(53), "the parent's flags");
        assert.notEqual(child.slice(36, 52), parent.slice(36, 52));
        spans.add(child.slice(36, 52));
      }
      assert.equal(spans.size, 200);
    }
    assert.equal(traceIdOf(VALID), "4bf92f3577b34da6a3ce929d0e0e4736");
  });

  it("childTraceparent and traceIdOf refuse what is not a traceparent, without repeating it", () => {
    for (const [name, value] of NOT_TRACEPARENTS) {
      assert.throws(() => childTraceparent(value as string), refusedTraceparent(value), name);
      assert.throws(() => traceIdOf(value as string), refusedTraceparent(value), name);
    }
  });

  it("connect refuses a traceContext that is not a function, naming it", async () => {
    for (const hook of [VALID, 42, null, { traceparent: VALID }]) {
      const options = { servers: "nats://127.0.0.1:1", runnerId: "sdkts-trace", traceContext: hook } as unknown as ConnectOptions;
      await assert.rejects(connect(options), (err) => {
        assert.ok(err instanceof InvalidRequest, `got ${String(err)}`);
        assert.deepEqual([err.code, err.field], ["invalid_field", "traceContext"]);
        assert.equal(err.message.includes(VALID), false);
        return true;
      });
    }
  });
});

// ---- against the services --------------------------------------------------------------------

interface Heard {
  subject: string;
  traceparents: string[];
  msgId: string | null;
  body: Record<string, unknown>;
}

/** A raw subscription of the test: every message on `subject`, with its `traceparent` headers. */
async function overhear(nc: NatsConnection, subject: string): Promise<Heard[]> {
  const heard: Heard[] = [];
  nc.subscribe(subject, {
    callback: (_err, msg) => {
      heard.push({
        subject: msg.subject,
        traceparents: msg.headers?.values(TRACEPARENT_HEADER) ?? [],
        msgId: msg.headers?.get("Nats-Msg-Id") ?? null,
        body: msg.json<Record<string, unknown>>(),
      });
    },
  });
  await nc.flush();
  return heard;
}

/** The one traceparent a heard message carried. */
function only(heard: Heard): string {
  assert.equal(heard.traceparents.length, 1, `one traceparent header on ${heard.subject}`);
  return heard.traceparents[0]!;
}

function saved(session: SessionRef, overrides: Partial<CommitArgs> = {}): CommitArgs {
  return {
    session, nativeSessionId: "thread-1", adapter: "codex", model: "gpt-5-codex", cwd: "/workspace/app",
    cursor: "c-1", checkpointPolicy: "same_session_only", ...overrides,
  };
}

function asked(session: SessionRef) {
  return { session, adapter: "codex", model: "gpt-5-codex", cwd: "/workspace/app", latestCursor: "c-1" };
}

const OPS = ["decide", "commit", "get", "reject", "claim"] as const;

/** Each session request once (a claim is refused by the services' default policy), then a
 * report; returns `lastTraceparent` after each, and the report's event id. */
async function everyCall(
  r: Runner,
  given: (op: (typeof OPS)[number] | "report") => string | undefined = () => undefined,
): Promise<{ last: (string | null)[]; eventId: string }> {
  const session = newSession("trace");
  const last: (string | null)[] = [];
  const tp = (op: (typeof OPS)[number] | "report") => {
    const traceparent = given(op);
    return traceparent === undefined ? {} : { traceparent };
  };
  await r.decide({ ...asked(session), ...tp("decide") });
  last.push(r.lastTraceparent);
  await r.commit({ ...saved(session), ...tp("commit") });
  last.push(r.lastTraceparent);
  await r.get(session, tp("get"));
  last.push(r.lastTraceparent);
  await r.reject(session, "thread-0", "resume_target_missing", tp("reject"));
  last.push(r.lastTraceparent);
  await assert.rejects(r.claim(session, tp("claim")), (err) => err instanceof ClaimRefused);
  last.push(r.lastTraceparent);
  const eventId = await r.reportResumeFailure({
    runId: uniqueId("run"), attempt: 1, session, nativeSessionId: "thread-1", ...tp("report"),
  });
  last.push(r.lastTraceparent);
  return { last, eventId };
}

describe("trace context against the services", () => {
  const stack = new Stack();
  let observer: Observer;
  const runners: Runner[] = [];

  async function runner(options: Partial<ConnectOptions> = {}): Promise<Runner> {
    const r = await connect({ servers: stack.natsUrl, runnerId: uniqueId("sdkts-tp"), requestTimeout: 5, ...options });
    runners.push(r);
    return r;
  }

  /** The runner's session requests and events, as they go over the wire. */
  async function wire(r: Runner): Promise<{ requests: Heard[]; events: Heard[] }> {
    return {
      requests: await overhear(observer.nc, `continuity.sessions.${r.runnerId}.>`),
      events: await overhear(observer.nc, `continuity.events.${r.runnerId}.>`),
    };
  }

  /** The headers of the event the stream stored last for the runner. */
  async function storedHeaders(r: Runner): Promise<MsgHdrs> {
    const stored = await observer.jsm.streams.getMessage(EVENTS_STREAM, {
      last_by_subj: subjects.event(r.runnerId, "resume_failed"),
    });
    assert.ok(stored !== null && stored.header !== undefined, "the event is stored with headers");
    return stored.header;
  }

  before(async () => {
    await stack.start();
    observer = await Observer.open(stack.natsUrl);
  });

  after(async () => {
    await Promise.all(runners.map((r) => r.close().catch(() => undefined)));
    await observer?.close();
    await stack.stop();
  });

  it("puts a new trace's traceparent on every request and event when none is given", async () => {
    const r = await runner();
    const { requests, events } = await wire(r);
    assert.equal(r.lastTraceparent, null, "nothing sent yet");
    const { last, eventId } = await everyCall(r);
    await waitFor(() => requests.length >= OPS.length && events.length >= 1, "the requests and the event overheard");
    assert.deepEqual(requests.map((h) => h.subject), OPS.map((op) => subjects.sessions(r.runnerId, op)));
    const sent = [...requests.map(only), only(events[0]!)];
    for (const tp of sent) {
      assert.equal(isTraceparent(tp), true, tp);
      assert.equal(tp.slice(53), "01", "a sampled root");
    }
    assert.equal(new Set(sent.map(traceIdOf)).size, sent.length, "a new trace for each message");
    assert.deepEqual(last, sent, "lastTraceparent after each call is what it sent");
    // The event keeps its message id beside its traceparent, and the stream stores both.
    assert.equal(events[0]!.msgId, eventId);
    const stored = await storedHeaders(r);
    assert.equal(stored.get("Nats-Msg-Id"), eventId);
    assert.deepEqual(stored.values(TRACEPARENT_HEADER), [r.lastTraceparent]);
  });

  it("puts the call's own traceparent on its message, ahead of the hook's", async () => {
    const hooked = newTraceparent();
    const r = await runner({ traceContext: () => hooked });
    const { requests, events } = await wire(r);
    const given = new Map([...OPS, "report" as const].map((op) => [op, newTraceparent()]));
    const { last } = await everyCall(r, (op) => given.get(op));
    await waitFor(() => requests.length >= OPS.length && events.length >= 1, "the requests and the event overheard");
    assert.deepEqual(requests.map(only), OPS.map((op) => given.get(op)));
    assert.equal(only(events[0]!), given.get("report"));
    assert.deepEqual((await storedHeaders(r)).values(TRACEPARENT_HEADER), [given.get("report")]);
    assert.deepEqual(last, [...OPS, "report"].map((op) => given.get(op as never)));
  });

  it("puts the traceContext hook's value on each message, asked once for each", async () => {
    const hooked = [...OPS, "report"].map(() => newTraceparent());
    let calls = 0;
    const r = await runner({ traceContext: () => hooked[calls++] });
    const { requests, events } = await wire(r);
    const { last } = await everyCall(r);
    await waitFor(() => requests.length >= OPS.length && events.length >= 1, "the requests and the event overheard");
    assert.equal(calls, OPS.length + 1, "once per message");
    assert.deepEqual([...requests.map(only), only(events[0]!)], hooked);
    assert.deepEqual((await storedHeaders(r)).values(TRACEPARENT_HEADER), [hooked[OPS.length]]);
    assert.deepEqual(last, hooked);
  });

  it("starts a new trace when the hook returns what is not a traceparent, or throws", async () => {
    const answers: (() => unknown)[] = [
      ...PLANTED.map(([, value]) => () => value),
      () => undefined,
      () => Promise.resolve(VALID),
      () => {
        throw new Error(`the tracer broke: ${MARKER}`);
      },
    ];
    let answer: () => unknown = () => undefined;
    const r = await runner({ traceContext: () => answer() as string | undefined });
    const { requests, events } = await wire(r);
    const session = newSession("hook");
    await r.commit(saved(session));
    for (const next of answers) {
      answer = next;
      await r.get(session);
    }
    answer = () => VALID.toUpperCase();
    await r.reportResumeFailure({ runId: uniqueId("run"), attempt: 1, session, nativeSessionId: "thread-1" });
    await waitFor(() => requests.length >= answers.length + 1 && events.length >= 1, "the requests and the event overheard");
    const sent = [...requests.slice(1).map(only), only(events[0]!)];
    for (const tp of sent) {
      assert.equal(isTraceparent(tp), true, tp);
      assert.notEqual(traceIdOf(tp), traceIdOf(VALID), "not the garbage's trace");
    }
    assert.equal(new Set(sent.map(traceIdOf)).size, sent.length, "a new trace each time");
    assert.deepEqual((await storedHeaders(r)).values(TRACEPARENT_HEADER), [sent.at(-1)]);
  });

  it("refuses a call's invalid traceparent without repeating it, sending nothing", async () => {
    const r = await runner({ publishAttempts: 1 });
    const { requests, events } = await wire(r);
    const session = newSession("refused");
    const quota: Refusal = {
      type: "refusal", runner_id: r.runnerId, run_id: uniqueId("run"), attempt: 1, event_id: "evt-1",
      session, code: "quota_exceeded", scope: "runner", quota: "event_rate", not_before: null,
      refused_at: new Date().toISOString(),
    } as unknown as Refusal;
    for (const [name, value] of PLANTED) {
      const traceparent = value as string;
      const calls: [string, () => Promise<unknown>][] = [
        ["decide", () => r.decide({ ...asked(session), traceparent })],
        ["commit", () => r.commit({ ...saved(session), traceparent })],
        ["get", () => r.get(session, { traceparent })],
        ["reject", () => r.reject(session, "thread-0", "resume_target_missing", { traceparent })],
        ["claim", () => r.claim(session, { traceparent })],
        ["report", () => r.reportResumeFailure({ runId: uniqueId("run"), attempt: 1, session, nativeSessionId: "t-1", traceparent })],
        // Refused before the refusal is even looked at (it was never sent: NotFound otherwise).
        ["reportAgain", () => r.reportAgain(quota, { traceparent })],
      ];
      for (const [call, make] of calls) await assert.rejects(make(), refusedTraceparent(value), `${call}: ${name}`);
    }
    assert.equal(r.lastTraceparent, null, "nothing was sent");
    // Then one request and one event that are sent: nothing overheard before them.
    const request = newTraceparent();
    const event = newTraceparent();
    await r.commit({ ...saved(session), traceparent: request });
    await r.reportResumeFailure({ runId: uniqueId("run"), attempt: 1, session, nativeSessionId: "t-1", traceparent: event });
    await waitFor(() => requests.length >= 1 && events.length >= 1, "the request and the event overheard");
    await observer.nc.flush();
    assert.deepEqual([requests.map(only), events.map(only)], [[request], [event]]);
  });

  it("passes on a decision's valid traceparent, and never a malformed one", async () => {
    const r = await runner();
    const valid = newTraceparent();
    const other = newTraceparent();
    const cases: { name: string; headers: [string, string][]; expected: string | undefined }[] = [
      { name: "valid", headers: [["traceparent", valid]], expected: valid },
      { name: "none", headers: [], expected: undefined },
      ...PLANTED.filter(([, v]) => typeof v === "string" && v !== "" && !/[\r\n]/.test(v) && v.trim() === v).map(([name, v]) => ({
        name, headers: [["traceparent", v as string]] as [string, string][], expected: undefined,
      })),
      { name: "a list of two", headers: [["traceparent", `${valid},${other}`]], expected: undefined },
      { name: "two headers", headers: [["traceparent", valid], ["traceparent", other]], expected: undefined },
      { name: "a long hostile value", headers: [["traceparent", `${valid}${";x".repeat(2000)}${MARKER}`]], expected: undefined },
      { name: "its name in capitals", headers: [["Traceparent", other]], expected: other },
    ];
    const decision = (runId: string) => ({
      type: "decision", decision_id: uniqueId("d"), runner_id: r.runnerId, run_id: runId, attempt: 1,
      session: newSession("traced"), action: "retry_same_session", reason: "native_session_interrupted",
      failure_class: "unclassified", epoch: null, not_before: null, detail: null, reconciled_outcome: null,
      decided_at: new Date().toISOString(), rule: "4.4.9",
    });
    const runs = cases.map(() => uniqueId("run"));
    for (const [i, c] of cases.entries()) {
      const headers = natsHeaders();
      for (const [key, value] of c.headers) headers.append(key, value);
      // JetStream's acknowledgement: stored on the decisions stream, in this order.
      await observer.nc.request(subjects.decisions(r.runnerId), JSON.stringify(decision(runs[i]!)), { headers, timeout: 5000 });
    }
    const stream = r.decisions();
    const seen: Delivery[] = [];
    for (const c of cases) {
      const delivery = (await stream.next()).value as Delivery;
      seen.push(delivery);
      assert.equal(delivery.traceparent, c.expected, c.name);
      delivery.ack();
    }
    await stream.return(undefined);
    assert.deepEqual(seen.map((d) => d.decision?.run_id), runs, "in the order published");

    // handleDecisions hands the same to its handler, beside the decision.
    const second = await runner();
    const contexts = new Map<string, TraceContext>();
    const handled = second.handleDecisions((d, context) => void contexts.set(d.run_id, context));
    const traced = [uniqueId("run"), uniqueId("run")];
    const published: [string, string][] = [[traced[0]!, valid], [traced[1]!, VALID.toUpperCase()]];
    for (const [runId, value] of published) {
      const headers = natsHeaders();
      headers.set("traceparent", value);
      const body = { ...decision(runId), runner_id: second.runnerId };
      await observer.nc.request(subjects.decisions(second.runnerId), JSON.stringify(body), { headers, timeout: 5000 });
    }
    await waitFor(() => contexts.size === 2, "both decisions handled");
    assert.deepEqual(contexts.get(traced[0]!), { traceparent: valid });
    assert.deepEqual(contexts.get(traced[1]!), { traceparent: undefined });
    await second.close();
    await handled;
  });

  it("hands an archive request's valid traceparent to the handler and answers in its trace", async () => {
    const seen: { request: ArchiveRequest; context: TraceContext }[] = [];
    const handler = (request: ArchiveRequest, context: TraceContext) => {
      seen.push({ request, context });
      return { exit_code: 0, timed_out: false, output: "moved" };
    };
    const plain = await runner();
    const hooked = newTraceparent();
    const withHook = await runner({ traceContext: () => hooked });
    plain.serveArchive(handler);
    withHook.serveArchive(handler);
    await plain.nc.flush();
    await withHook.nc.flush();
    const ask = async (r: Runner, traceparent: string | null) => {
      const request = { archive_id: uniqueId("a"), run_id: uniqueId("run"), native_session_id: "thread-1", session: newSession("archive") };
      const headers = natsHeaders();
      if (traceparent !== null) headers.set("traceparent", traceparent);
      const reply = await observer.nc.request(subjects.archive(r.runnerId), JSON.stringify(request), { headers, timeout: 5000 });
      assert.deepEqual(reply.json(), { exit_code: 0, timed_out: false, output: "moved" });
      const answered = reply.headers?.values("traceparent") ?? [];
      assert.equal(answered.length, 1, "the answer carries one traceparent");
      const last = seen.at(-1)!;
      assert.equal(last.request.archive_id, request.archive_id);
      return { context: last.context, answered: answered[0]! };
    };
    const requested = newTraceparent();
    const before = plain.lastTraceparent;

    const valid = await ask(plain, requested);
    assert.deepEqual(valid.context, { traceparent: requested });
    assert.equal(isTraceparent(valid.answered), true);
    assert.equal(traceIdOf(valid.answered), traceIdOf(requested), "the answer is in the request's trace");
    assert.notEqual(valid.answered, requested, "its own span");

    for (const bad of [VALID.toUpperCase(), `00-${"0".repeat(32)}-00f067aa0ba902b7-01`, MARKER]) {
      const refused = await ask(plain, bad);
      assert.deepEqual(refused.context, { traceparent: undefined });
      assert.equal(isTraceparent(refused.answered), true);
      assert.notEqual(traceIdOf(refused.answered), traceIdOf(VALID));
    }
    const none = await ask(plain, null);
    assert.deepEqual(none.context, { traceparent: undefined });
    assert.equal(isTraceparent(none.answered), true);
    assert.equal(plain.lastTraceparent, before, "archive answers leave lastTraceparent");

    const fromHook = await ask(withHook, requested);
    assert.deepEqual(fromHook.context, { traceparent: requested });
    assert.equal(fromHook.answered, hooked, "the hook's value comes first");
  });
});

// ---- the header block and the server's max_payload -------------------------------------------

describe("trace context under a small max_payload", () => {
  const MAX_PAYLOAD = 4096;
  const stack = new Stack();
  let listener: NatsConnection;
  let r: Runner;
  const retries: number[] = [];

  /** The bytes of a header block of `lines` (`NATS/1.0`, one `key: value` line each, an empty line). */
  const block = (lines: [string, string][]) =>
    new TextEncoder().encode(`NATS/1.0\r\n${lines.map(([k, v]) => `${k}: ${v}\r\n`).join("")}\r\n`).length;

  before(async () => {
    await stack.start({ services: false, maxPayload: MAX_PAYLOAD });
    listener = await natsConnect({ servers: stack.natsUrl });
    r = await connect({
      servers: stack.natsUrl, runnerId: "sdkts-tp-size", requestTimeout: 0.5, publishAttempts: 2,
      onPublishRetry: (_id, attempt) => void retries.push(attempt),
    });
    assert.equal(r.nc.info?.max_payload, MAX_PAYLOAD);
  });

  after(async () => {
    await r?.close();
    await listener?.close();
    await stack.stop();
  });

  it("counts a request's header block into its size, to the byte", async () => {
    const session = newSession("size");
    const heard: string[] = [];
    listener.subscribe(subjects.sessions(r.runnerId, "decide"), {
      callback: (_err, msg) => {
        heard.push(msg.headers?.get("traceparent") ?? "");
        msg.respond(JSON.stringify({ mode: "fresh", resume_session_id: null, transcript: "full", reason: "no_session", revision: null, epoch: null }));
      },
    });
    await listener.flush();
    const args = (cwd: string) => ({ session, adapter: "codex", model: "gpt-5-codex", cwd });
    const bodyOf = (cwd: string) =>
      encodeChecked(DECIDE_REQUEST, { session, adapter: "codex", model: "gpt-5-codex", cwd }, LIMITS.requestBytes).length;
    const header = block([["traceparent", VALID]]);
    assert.equal(header, 82);
    const base = bodyOf("");
    const fits = "x".repeat(MAX_PAYLOAD - header - base); // body and header: exactly max_payload
    assert.equal(bodyOf(fits) + header, MAX_PAYLOAD);

    const traceparent = newTraceparent();
    const reply = await r.decide({ ...args(fits), traceparent });
    assert.equal(reply.mode, "fresh");
    assert.deepEqual(heard, [traceparent]);

    // One byte more: it would fit without its header, so only the header's bytes refuse it.
    assert.ok(bodyOf(`${fits}x`) <= MAX_PAYLOAD && bodyOf(`${fits}x`) <= LIMITS.requestBytes);
    await assert.rejects(r.decide(args(`${fits}x`)), (err) => {
      assert.ok(err instanceof InvalidRequest, `got ${String(err)}`);
      assert.deepEqual([err.status, err.code, err.field], [400, "payload_too_large", null]);
      assert.match(err.message, new RegExp(`${MAX_PAYLOAD + 1} bytes.*max_payload of ${MAX_PAYLOAD}`));
      return true;
    });
    await r.decide({ ...args("/w"), traceparent: VALID });
    await waitFor(() => heard.length >= 2, "the next request overheard");
    assert.deepEqual(heard, [traceparent, VALID], "the refused one was not sent");
  });

  it("counts an event's headers (traceparent, message id, stream) into its size: sent at the limit, refused one byte over", async () => {
    const session = newSession("size");
    const heard: string[] = [];
    const traced: string[] = [];
    // Heard, never answered: no stream takes the subject here, and nothing acknowledges it.
    listener.subscribe(subjects.event(r.runnerId, "resume_failed"), {
      callback: (_err, msg) => {
        heard.push(msg.headers?.get("Nats-Msg-Id") ?? "");
        traced.push(msg.headers?.get("traceparent") ?? "");
      },
    });
    await listener.flush();
    const eventId = (n: number) => `evt-size-${n}`;
    const report = (n: number, message: string) => ({
      runId: "run-size", attempt: 1, session, nativeSessionId: "thread-1", eventId: eventId(n),
      error: { type: "transport", code: "stream_closed", message },
    });
    const bodyOf = (n: number, message: string) =>
      encodeChecked(RESUME_FAILED, {
        type: "resume_failed", event_id: eventId(n), runner_id: r.runnerId, run_id: "run-size", attempt: 1, session,
        native_session_id: "thread-1", occurred_at: new Date().toISOString(),
        error: { type: "transport", code: "stream_closed", message },
      }, LIMITS.eventBytes).length;
    const header = (n: number) =>
      block([["traceparent", VALID], ["Nats-Msg-Id", eventId(n)], ["Nats-Expected-Stream", EVENTS_STREAM]]);
    const fits = "m".repeat(MAX_PAYLOAD - header(1) - bodyOf(1, ""));
    assert.equal(bodyOf(1, fits) + header(1), MAX_PAYLOAD);

    // Exactly max_payload: sent, and sent again (publishAttempts 2) as nothing acknowledges it.
    await assert.rejects(r.reportResumeFailure(report(1, fits)), (err) => err instanceof Unavailable);
    await waitFor(() => heard.filter((id) => id === eventId(1)).length === 2, "the event at max_payload sent twice");
    // Sent again (unacknowledged) with the same message id and the same traceparent.
    assert.equal(isTraceparent(traced[0]), true);
    assert.deepEqual(traced.slice(0, 2), [traced[0], traced[0]]);

    // One byte more: refused at once, never sent, never retried (a publish the client refused would be).
    retries.length = 0;
    await assert.rejects(r.reportResumeFailure(report(2, `${fits}m`)), (err) => {
      assert.ok(err instanceof InvalidRequest, `got ${String(err)}`);
      assert.deepEqual([err.code, err.field], ["payload_too_large", null]);
      return true;
    });
    assert.deepEqual(retries, []);
    await assert.rejects(r.reportResumeFailure(report(3, "short")), (err) => err instanceof Unavailable);
    await waitFor(() => heard.includes(eventId(3)), "the next event overheard");
    assert.deepEqual([...new Set(heard)], [eventId(1), eventId(3)], "the refused one was not sent");
  });
});
