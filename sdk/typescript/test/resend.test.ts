/**
 * `Runner.resend` against the services, for a report the events stream lost (docs/protocol.md,
 * "Under partitions"): the stack starts without the classifier, the operator deletes the
 * runner's report from CONTINUITY_EVENTS before the classifier ever runs, so nothing decides it;
 * sent again under a new event id it is decided, and sent again once more it makes no second
 * decision (the classifier decides once per run and attempt, contract 4.5). A report the runner
 * does not keep is `NotFound`; the report sent again carries the `traceparent` it was given.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  connect,
  DECISIONS_STREAM,
  EVENTS_STREAM,
  InvalidRequest,
  newTraceparent,
  NotFound,
  subjects,
  type Runner,
} from "../src/index.js";
import { Inbox, Observer } from "./support/inbox.js";
import { newSession, randomKey, Stack, uniqueId, waitFor } from "./support/stack.js";

const KEY = randomKey();
const CLASSIFIER = "classifier"; // its durable consumer on CONTINUITY_EVENTS
const stack = new Stack();
let observer: Observer;
const runners: Runner[] = [];

before(async () => {
  // The classifier starts when the test says: until then no event of the stream is consumed.
  await stack.start({ runnerKeys: { k1: KEY }, later: ["classifier"] });
  observer = await Observer.open(stack.natsUrl);
});

after(async () => {
  await Promise.all(runners.map((r) => r.close().catch(() => undefined)));
  await observer?.close();
  await stack.stop();
});

/** The classifier's consumer exists and holds nothing: every stored event was delivered to it
 * and acknowledged (`throughLast`: up to the stream's last sequence). */
async function classifierSettled(throughLast: boolean): Promise<boolean> {
  let info;
  try {
    info = await observer.jsm.consumers.info(EVENTS_STREAM, CLASSIFIER);
  } catch {
    return false; // not created yet
  }
  if (info.num_pending !== 0 || info.num_ack_pending !== 0) return false;
  if (!throughLast) return true;
  const last = (await observer.jsm.streams.info(EVENTS_STREAM)).state.last_seq;
  return info.delivered.stream_seq === last;
}

/** The stored report last published on the runner's `resume_failed` subject: its sequence, body
 * and `traceparent` header. */
async function lastReport(
  runnerId: string,
): Promise<{ seq: number; body: Record<string, unknown>; traceparent: string | undefined }> {
  const stored = await observer.jsm.streams.getMessage(EVENTS_STREAM, {
    last_by_subj: subjects.event(runnerId, "resume_failed"),
  });
  assert.ok(stored !== null, "a stored report");
  return { seq: stored.seq, body: stored.json<Record<string, unknown>>(), traceparent: stored.header?.get("traceparent") };
}

/** Every message the decisions stream holds on the runner's subject (decisions and refusals),
 * read by sequence (the test's server may predate consumers with several filters). */
async function storedDecisions(runnerId: string): Promise<Record<string, unknown>[]> {
  const subject = subjects.decisions(runnerId);
  const { first_seq, last_seq } = (await observer.jsm.streams.info(DECISIONS_STREAM)).state;
  const out: Record<string, unknown>[] = [];
  for (let seq = first_seq; seq <= last_seq; seq++) {
    const m = await observer.jsm.streams.getMessage(DECISIONS_STREAM, { seq }).catch(() => null);
    if (m !== null && m.subject === subject) out.push(m.json<Record<string, unknown>>());
  }
  assert.equal(out.length, await observer.stored(DECISIONS_STREAM, subject), "every stored message read");
  return out;
}

describe("resend", () => {
  it("sends a report the stream lost again under a new event id: decided once, however often sent", async () => {
    const r = await connect({ servers: stack.natsUrl, runnerId: uniqueId("sdkts-resend"), signingKeys: { k1: KEY }, requestTimeout: 5 });
    runners.push(r);
    const inbox = new Inbox(r);
    const session = newSession("resend");
    await r.commit({
      session, nativeSessionId: "thread-1", adapter: "codex", model: "gpt-5-codex", cwd: "/workspace/app",
      cursor: "c-1", checkpointPolicy: "same_session_only",
    });
    const runId = uniqueId("run");
    const eventId = await r.reportResumeFailure({
      runId, attempt: 1, session, nativeSessionId: "thread-1", error: { type: "transport", code: "stream_closed" },
    });

    // The stream loses it: the operator deletes it before any classifier has seen it.
    const lost = await lastReport(r.runnerId);
    assert.equal(lost.body.event_id, eventId);
    assert.equal(await observer.jsm.streams.deleteMessage(EVENTS_STREAM, lost.seq), true);
    await stack.startService("classifier");
    await waitFor(() => classifierSettled(false), "the classifier's consumer, with nothing pending");
    assert.deepEqual(await storedDecisions(r.runnerId), [], "nothing decided the lost report");

    const again = await r.resend(eventId);
    const decided = await inbox.next(runId);
    assert.notEqual(again, eventId, "under a new event id");
    assert.deepEqual([decided.run_id, decided.attempt], [runId, 1]);
    // The same report (its failure, its time), only its id new.
    assert.deepEqual((await lastReport(r.runnerId)).body, { ...lost.body, event_id: again });

    // Sent again once more after its decision: stored, handled, and no second decision.
    const traceparent = newTraceparent();
    const third = await r.resend(again, { traceparent });
    assert.ok(third !== eventId && third !== again, "a new event id again");
    const thirdStored = await lastReport(r.runnerId);
    assert.deepEqual([thirdStored.body.event_id, thirdStored.traceparent], [third, traceparent], "with the traceparent given");
    assert.equal(r.lastTraceparent, traceparent);
    await waitFor(() => classifierSettled(true), "the third copy handled");
    const stored = await storedDecisions(r.runnerId);
    assert.deepEqual(
      stored.map((m) => [m.type ?? "decision", m.run_id, m.attempt]),
      [["decision", runId, 1]],
      "one decision for the run and attempt, no refusal",
    );
    assert.equal(inbox.of(runId).length, 1);

    const notKept = (err: unknown) => {
      assert.ok(err instanceof NotFound, `expected NotFound, got ${String(err)}`);
      assert.deepEqual([err.status, err.code], [404, "not_found"]);
      return true;
    };
    await assert.rejects(r.resend("never-sent"), notKept);
    await assert.rejects(r.resend(eventId), notKept, "forgotten once sent again");
    // A malformed traceparent is refused before anything is looked up or sent.
    await assert.rejects(
      r.resend(third, { traceparent: "00-bad" }),
      (err) => err instanceof InvalidRequest && err.field === "traceparent",
    );
    assert.equal((await lastReport(r.runnerId)).body.event_id, third, "nothing sent");
  });
});
