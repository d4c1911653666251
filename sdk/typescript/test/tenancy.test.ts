/**
 * The TS SDK against the four services with tenancy enforced (contract section 10): runners issued
 * for their tenants by the operators' request `continuity.runners.put`. An issued runner's session
 * requests work; another runner's commit over its session is `SessionNotOwned` and a runner outside
 * the tenant sees nothing; a claim (allowed here) moves the session and fences its previous owner;
 * an event on another runner's session comes back to its runner as a refusal, acknowledged (with a
 * process warning when the runner passed no `onRefusal`); and a report over the runner's quota is
 * sent again at `not_before` by `reportAgain` (with the `traceparent` it was given), then decided
 * once.
 */

import assert from "node:assert/strict";
import { after, afterEach, before, describe, it } from "node:test";
import {
  connect,
  ContinuityError,
  InvalidRequest,
  newTraceparent,
  NotFound,
  SessionNotOwned,
  type CommitArgs,
  type Refusal,
  type Runner,
  type SessionRef,
} from "../src/index.js";
import { Inbox, Observer } from "./support/inbox.js";
import { randomKey, Stack, uniqueId, waitFor } from "./support/stack.js";

const KEY = randomKey();
const stack = new Stack();
let observer: Observer;
const runners: Runner[] = [];

/** A connected runner issued for `tenants` by the operators' request (none: not issued at all). */
async function runner(...tenants: string[]): Promise<Runner> {
  const runnerId = uniqueId("sdkts-t");
  if (tenants.length > 0) {
    const issued = await observer.request("continuity.runners.put", { runner_id: runnerId, tenants, actor: "sdkts" });
    assert.equal(issued.code, null, `issued ${runnerId}`);
    assert.deepEqual([issued.body.status, issued.body.tenants], ["active", tenants]);
  }
  const r = await connect({ servers: stack.natsUrl, runnerId, signingKeys: { k1: KEY }, requestTimeout: 5 });
  runners.push(r);
  return r;
}

function acme(): SessionRef {
  return { tenant: "acme", conversation_id: uniqueId("conv"), agent_id: "coder" };
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

/** Everything on the runner's decisions subject was delivered and acknowledged. */
async function settled(runnerId: string): Promise<boolean> {
  try {
    const info = await observer.jsm.consumers.info("CONTINUITY_DECISIONS", runnerId);
    return info.num_pending === 0 && info.num_ack_pending === 0 && info.delivered.stream_seq > 0;
  } catch {
    return false; // the runner has not made its consumer yet
  }
}

/** A check of `assert.rejects`: the error's class, status and code. */
function rejectsWith(cls: new (...args: never[]) => ContinuityError, status: number, code: string) {
  return (err: unknown) => {
    assert.ok(err instanceof cls, `expected ${cls.name}, got ${String(err)}`);
    assert.deepEqual([err.status, err.code], [status, code]);
    return true;
  };
}

before(async () => {
  await stack.start({
    runnerKeys: { k1: KEY },
    env: {
      CONTINUITY_TENANCY: "enforced",
      CONTINUITY_RUNNER_CACHE_S: "0.05",
      CONTINUITY_SESSION_CLAIMS: "allow",
      // A burst of one event a runner: its second report at once is refused for the quota.
      CONTINUITY_RUNNER_EVENT_RATE: "1",
      CONTINUITY_RUNNER_EVENT_BURST: "1",
    },
  });
  observer = await Observer.open(stack.natsUrl);
});

afterEach(async () => {
  await Promise.all(runners.splice(0).map((r) => r.close().catch(() => undefined)));
});

after(async () => {
  await observer?.close();
  await stack.stop();
});

describe("the runner SDK with tenancy enforced", () => {
  it("an issued runner's session is its own: others meet an owner, or see nothing", async () => {
    const a = await runner("acme");
    const b = await runner("acme", "initech");
    const c = await runner("globex");
    const d = await runner();
    const s = acme();
    const fresh = await a.decide(asked(s));
    assert.deepEqual([fresh.mode, fresh.reason], ["fresh", "no_session"]);
    assert.deepEqual([fresh.rule, fresh.policy, fresh.generation], ["3.3.1a", "shipped-1", "not_compared"]);
    const committed = await a.commit(saved(s));
    const ready = await a.decide(asked(s));
    assert.deepEqual([ready.mode, ready.resume_session_id, ready.revision], ["resume", "thread-1", committed.revision]);
    const view = await a.get(s);
    assert.deepEqual([view.owner, view.native_session_id, view.state], [a.runnerId, "thread-1", "active"]);

    await assert.rejects(b.commit(saved(s, { nativeSessionId: "thread-evil" })), rejectsWith(SessionNotOwned, 409, "session_not_owned"));
    for (const other of [c, d]) {
      await assert.rejects(other.commit(saved(s, { nativeSessionId: "thread-evil" })), rejectsWith(NotFound, 404, "not_found"));
      await assert.rejects(other.claim(s), rejectsWith(NotFound, 404, "not_found"));
    }
    for (const other of [b, c, d]) {
      await assert.rejects(other.get(s), rejectsWith(NotFound, 404, "not_found"));
      const seen = await other.decide(asked(s));
      assert.deepEqual([seen.mode, seen.reason, seen.resume_session_id], ["fresh", "no_session", null]);
      // Explained as a missing session is: nothing tells that a record exists.
      assert.deepEqual([seen.rule, seen.policy, seen.generation], [fresh.rule, fresh.policy, fresh.generation]);
      assert.deepEqual(await other.reject(s, "thread-1", "resume_target_missing"), { cleared: false });
    }
    assert.deepEqual(await a.get(s), view, "nothing of it changed");
    assert.deepEqual(await a.reject(s, "thread-1", "resume_target_corrupt"), { cleared: true });
  });

  it("a claim moves the session and fences its previous owner", async () => {
    const a = await runner("acme");
    const b = await runner("acme");
    const s = acme();
    const first = await a.commit(saved(s));
    const moved = await b.claim(s);
    assert.deepEqual(
      [moved.owner, moved.previous_owner, moved.epoch, moved.revision],
      [b.runnerId, a.runnerId, first.epoch + 1, first.revision + 1],
    );
    await assert.rejects(a.commit(saved(s, { nativeSessionId: "thread-old", epoch: first.epoch })), rejectsWith(SessionNotOwned, 409, "session_not_owned"));
    assert.equal((await b.commit(saved(s, { nativeSessionId: "thread-2", epoch: moved.epoch }))).epoch, moved.epoch);
    assert.equal((await b.get(s)).owner, b.runnerId);
  });

  it("an event on another runner's session comes back to its runner as a refusal, acknowledged", async () => {
    const a = await runner("acme");
    const b = await runner("acme");
    const s = acme();
    await a.commit(saved(s, { checkpointPolicy: "allow_replacement_after_resume_failure" }));
    const before = await a.get(s);
    const inbox = new Inbox(b);
    const runId = uniqueId("run");
    const eventId = await b.reportResumeFailure({
      runId, attempt: 1, session: s, nativeSessionId: "thread-1", error: { type: "transport", code: "stream_closed" },
    });
    const refusal = await waitFor(() => inbox.refusals[0], "the refusal of b's event");
    assert.deepEqual(
      [refusal.type, refusal.runner_id, refusal.run_id, refusal.attempt, refusal.event_id],
      ["refusal", b.runnerId, runId, 1, eventId],
    );
    assert.deepEqual([refusal.code, refusal.scope, refusal.quota, refusal.not_before], ["session_not_owned", null, null, null]);
    await waitFor(() => settled(b.runnerId), "the refusal acknowledged");
    assert.deepEqual([inbox.received.length, inbox.refusals.length], [0, 1]);
    assert.deepEqual(await a.get(s), before, "nothing archived, held or fenced");
    await assert.rejects(b.reportAgain(refusal), (err) => err instanceof InvalidRequest && err.field === "code");
  });

  it("without onRefusal a refusal is acknowledged with a process warning", async () => {
    const a = await runner("acme");
    const c = await runner("globex");
    const s = acme();
    await a.commit(saved(s));
    const warnings: Error[] = [];
    const listen = (w: Error) => warnings.push(w);
    process.on("warning", listen);
    try {
      const inbox = new Inbox(c, { refusals: false });
      const runId = uniqueId("run");
      const eventId = await c.reportResumeFailure({ runId, attempt: 1, session: s, nativeSessionId: "thread-1" });
      await waitFor(() => settled(c.runnerId), "the refusal acknowledged");
      const told = await waitFor(() => warnings.find((w) => w.name === "ContinuityRefusal"), "the warning");
      assert.equal(told.message, `event ${eventId} of run ${runId} attempt 1 refused: tenant_not_allowed`);
      assert.deepEqual([inbox.received.length, inbox.refusals.length], [0, 0]);
    } finally {
      process.off("warning", listen);
    }
  });

  it("a report over the quota is sent again at not_before by reportAgain, then decided once", async () => {
    const a = await runner("acme");
    // Each event as it goes over the wire: its message id and its traceparent.
    const wire = new Map<string, string | undefined>();
    observer.nc.subscribe(`continuity.events.${a.runnerId}.>`, {
      callback: (_err, msg) => void wire.set(msg.headers?.get("Nats-Msg-Id") ?? "", msg.headers?.get("traceparent")),
    });
    await observer.nc.flush();
    const sentAgain: { refusal: Refusal; eventId: string; at: number; traceparent: string }[] = [];
    const inbox = new Inbox(a, {
      onRefusal: async (refusal) => {
        const traceparent = newTraceparent();
        const eventId = await a.reportAgain(refusal, { traceparent });
        sentAgain.push({ refusal, eventId, at: Date.now(), traceparent });
      },
    });
    const runs = [uniqueId("run"), uniqueId("run")];
    const reported = new Map<string, string>();
    for (const runId of runs) {
      const s = acme();
      await a.commit(saved(s));
      reported.set(await a.reportResumeFailure({ runId, attempt: 1, session: s, nativeSessionId: "thread-1" }), runId);
    }
    for (const runId of runs) await inbox.next(runId);
    // One of the two came over the burst of 1: refused with when to send it, sent again (more than
    // once if a resend came a hair early), and decided once, at or after not_before.
    assert.ok(sentAgain.length > 0, "a refusal for the quota");
    for (const { refusal, eventId, at, traceparent } of sentAgain) {
      assert.deepEqual([refusal.code, refusal.scope, refusal.quota], ["quota_exceeded", "runner", "event_rate"]);
      assert.ok(refusal.not_before !== null && at >= Date.parse(refusal.not_before), "sent at or after not_before");
      assert.equal(reported.has(eventId), false, "under a new event id");
      await waitFor(() => wire.has(eventId), `the event ${eventId} overheard`);
      assert.equal(wire.get(eventId), traceparent, "with the traceparent reportAgain was given");
    }
    const refused = sentAgain[0]!.refusal;
    const runId = reported.get(refused.event_id);
    assert.ok(runId !== undefined, "the refusal names a reported event");
    assert.equal(inbox.of(runId).length, 1);
    assert.ok(Date.parse(inbox.of(runId)[0]!.decided_at) >= Date.parse(refused.not_before!));
    const unknown: Refusal = { ...refused, event_id: "never-sent" };
    await assert.rejects(a.reportAgain(unknown), rejectsWith(NotFound, 404, "not_found"));
  });
});
