/**
 * Events, decisions and the archive move through the TS SDK against the four running services:
 * signatures the SDK makes are accepted and a wrong key is quarantined; a raising decision handler
 * gets its decision again; the archive handler answers the archiver; a publish that fails while
 * NATS restarts is retried with the same message id and decided once.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  connect,
  SessionHeld,
  StaleEpoch,
  subjects,
  Unavailable,
  type ArchiveRequest,
  type CheckpointPolicy,
  type ConnectOptions,
  type Runner,
  type SessionRef,
} from "../src/index.js";
import { Inbox, Observer } from "./support/inbox.js";
import { newSession, randomKey, ROOT, Stack, uniqueId, waitFor } from "./support/stack.js";

const KEY = randomKey();
const stack = new Stack();
let observer: Observer;
const runners: Runner[] = [];

async function runner(options: Partial<ConnectOptions> = {}): Promise<Runner> {
  const r = await connect({
    servers: stack.natsUrl,
    runnerId: uniqueId("sdkts"),
    signingKeys: { k1: KEY },
    requestTimeout: 5,
    nakDelay: 0.2,
    ...options,
  });
  runners.push(r);
  return r;
}

async function saved(r: Runner, session: SessionRef, policy: CheckpointPolicy, nativeSessionId = "thread-1") {
  return r.commit({
    session,
    nativeSessionId,
    adapter: "codex",
    model: "gpt-5-codex",
    cwd: "/workspace/app",
    cursor: "c-1",
    checkpointPolicy: policy,
  });
}

before(async () => {
  await stack.start({
    runnerKeys: { k1: KEY },
    env: { CONTINUITY_RETRY_BACKOFF_S: "1", CONTINUITY_ARCHIVE_TIMEOUT_S: "10" },
  });
  observer = await Observer.open(stack.natsUrl);
});

after(async () => {
  await Promise.all(runners.map((r) => r.close().catch(() => undefined)));
  await observer?.close();
  await stack.stop();
});

describe("the runner SDK against the services", () => {
  it("signs a refusal the classifier accepts: operator, the session held, SessionHeld on re-commit", async () => {
    const r = await runner();
    const session = newSession("refusal");
    await saved(r, session, "allow_replacement_after_resume_failure");
    const runId = uniqueId("run");
    const commandResult = r.signCommandResult({
      runId,
      attempt: 1,
      command: "provider.attach",
      status: "refused",
      classification: "provider_attach_refused",
    });
    await r.reportResumeFailure({ runId, attempt: 1, session, nativeSessionId: "thread-1", commandResult });
    const deliveries = r.decisions();
    const first = await deliveries.next();
    assert.equal(first.done, false);
    const delivery = first.value!;
    assert.equal(delivery.deliveryCount, 1);
    assert.equal(delivery.redelivered, false);
    const d = delivery.decision;
    assert.ok(d !== null, "a decision, not a refusal");
    assert.deepEqual(
      [d.run_id, d.attempt, d.action, d.reason, d.failure_class, d.rule],
      [runId, 1, "operator", "native_provider_state_incompatible", "provider_attach_refused", "4.4.2"],
    );
    delivery.ack();
    await deliveries.return(undefined);
    assert.equal((await r.get(session)).state, "held");
    await assert.rejects(saved(r, session, "same_session_only"), (err) => {
      assert.ok(err instanceof SessionHeld);
      assert.equal(err.code, "session_held");
      return true;
    });
  });

  it("quarantines a command result signed with the wrong key or an unknown key id, with no decision", async () => {
    const quarantined = observer.deadLetters("continuity.dead.quarantine");
    await observer.nc.flush();
    const cases: { keys: Record<string, Uint8Array>; reason: string }[] = [
      { keys: { k1: randomKey() }, reason: "signature_invalid" },
      { keys: { "k-unknown": KEY }, reason: "unknown_key" },
    ];
    for (const { keys, reason } of cases) {
      const r = await runner({ signingKeys: keys });
      const session = newSession("forged");
      const runId = uniqueId("run");
      const commandResult = r.signCommandResult({
        runId,
        attempt: 1,
        command: "provider.attach",
        status: "refused",
        classification: "provider_attach_refused",
      });
      const eventId = await r.reportResumeFailure({ runId, attempt: 1, session, nativeSessionId: "t-1", commandResult });
      const letter = await waitFor(() => quarantined.find((q) => q.body?.event_id === eventId), `dead letter ${reason}`);
      assert.equal(letter.reason, reason);
      // No decision was made: the run has no record at all.
      const run = await observer.request("continuity.runs.get", { run_id: runId });
      assert.equal(run.code, "not_found");
    }
  });

  it("gives a decision back when the handler raises: it is delivered again and then acknowledged", async () => {
    const r = await runner();
    const session = newSession("nak");
    await saved(r, session, "same_session_only");
    const inbox = new Inbox(r);
    const runId = uniqueId("run");
    inbox.failFirstOfRun.add(runId);
    await r.reportResumeFailure({ runId, attempt: 1, session, nativeSessionId: "thread-1" });
    const d = await inbox.next(runId);
    assert.equal(d.action, "retry_same_session");
    assert.equal(d.reason, "native_session_interrupted");
    assert.ok(d.not_before, "a retry says when");
    assert.equal(inbox.deliveries.get(d.decision_id), 2, "the first delivery raised, the second was handled");
    await waitFor(async () => {
      const info = await observer.jsm.consumers.info("CONTINUITY_DECISIONS", r.runnerId);
      return info.num_ack_pending === 0 && info.num_pending === 0;
    }, "the decision to be acknowledged");
    assert.equal(inbox.deliveries.get(d.decision_id), 2);
  });

  it("answers the archiver's remote move: archive, then open_replacement with the new epoch", async () => {
    const r = await runner();
    const moves: ArchiveRequest[] = [];
    r.serveArchive((request) => {
      moves.push(request);
      return { exit_code: 0, timed_out: false, output: "moved aside" };
    });
    await r.nc.flush();
    const inbox = new Inbox(r);
    const session = newSession("archive");
    const before = await saved(r, session, "allow_replacement_after_resume_failure");
    const runId = uniqueId("run");
    await r.reportResumeFailure({ runId, attempt: 1, session, nativeSessionId: "thread-1" });
    const d = await inbox.next(runId);
    assert.equal(d.action, "open_replacement");
    assert.equal(d.reason, "native_session_continuity_break");
    assert.equal(d.rule, "4.4.7", "the row that asked for the archive, carried by the archiver's decision");
    assert.equal(d.epoch, before.epoch + 1);
    assert.equal(moves.length, 1);
    assert.equal(moves[0]!.run_id, runId);
    assert.equal(moves[0]!.native_session_id, "thread-1");
    assert.deepEqual(moves[0]!.session, session);
    assert.equal((await r.get(session)).state, "archived");
    // The replacement commits with the decision's epoch; a runner from before it is fenced out.
    await r.commit({
      session, nativeSessionId: "thread-2", adapter: "codex", model: "gpt-5-codex", cwd: "/workspace/app",
      cursor: null, checkpointPolicy: "allow_replacement_after_resume_failure", epoch: d.epoch,
    });
    await assert.rejects(
      r.commit({
        session, nativeSessionId: "thread-1", adapter: "codex", model: "gpt-5-codex", cwd: "/workspace/app",
        cursor: "c-2", checkpointPolicy: "allow_replacement_after_resume_failure", epoch: before.epoch,
      }),
      (err) => err instanceof StaleEpoch && err.code === "stale_epoch",
    );
    assert.equal((await r.get(session)).native_session_id, "thread-2");
  });

  it("answers exit code 1 without the error's text when the archive handler raises", async () => {
    const r = await runner();
    r.serveArchive(() => {
      throw new Error("mv failed: password=hunter2-sdkts");
    });
    await r.nc.flush();
    const inbox = new Inbox(r);
    const session = newSession("archive-fail");
    await saved(r, session, "allow_replacement_after_resume_failure");
    const runId = uniqueId("run");
    await r.reportResumeFailure({ runId, attempt: 1, session, nativeSessionId: "thread-1" });
    const d = await inbox.next(runId);
    assert.equal(d.action, "retry_same_session");
    assert.equal(d.reason, "runner_continuity_break_archive_failed");
    assert.equal(d.rule, null, "a failed archive's retry is contract 5's, not a row of the table");
    assert.ok(d.detail?.startsWith("runner_continuity_break_archive_failed: exit=1 timedOut=false"), d.detail ?? "");
    assert.equal(d.detail?.includes("hunter2"), false);
    assert.equal((await r.get(session)).state, "active", "a failed remote move leaves the record");
  });

  it("reads a decision of an earlier release, without a type or a rule, with rule null", async () => {
    const r = await runner();
    const inbox = new Inbox(r);
    const runId = uniqueId("run");
    const old = {
      decision_id: uniqueId("d"), runner_id: r.runnerId, run_id: runId, attempt: 1, session: newSession("old"),
      action: "retry_same_session", reason: "native_session_interrupted", failure_class: "unclassified",
      epoch: null, not_before: null, detail: null, reconciled_outcome: null, decided_at: new Date().toISOString(),
    };
    await observer.nc.request(subjects.decisions(r.runnerId), JSON.stringify(old)); // JetStream's ack
    const d = await inbox.next(runId);
    assert.deepEqual([d.type, d.action, d.rule], ["decision", "retry_same_session", null]);
  });

  it("lets a second process of the runner bind the same durable consumer", async () => {
    // A short ack wait: a redelivery that went to the first process's last pull comes back soon.
    const first = await runner({ ackWait: 2 });
    const session = newSession("bind");
    await saved(first, session, "same_session_only");
    const runId = uniqueId("run");
    await first.reportResumeFailure({ runId, attempt: 1, session, nativeSessionId: "thread-1" });
    const stream = first.decisions();
    const delivery = (await stream.next()).value!;
    assert.equal(delivery.decision?.run_id, runId);
    delivery.nak(0); // given back, not acknowledged
    await stream.return(undefined);
    await first.close();
    const second = await runner({ runnerId: first.runnerId });
    const again = (await second.decisions().next()).value!;
    assert.equal(again.decision?.decision_id, delivery.decision?.decision_id);
    // Given back to the durable consumer, not lost with the first process's pull.
    again.ack();
  });

  it("runs the README's example journey", () => {
    const out = spawnSync(process.execPath, [join(ROOT, "sdk/typescript/dist/examples/journey.js")], {
      env: { ...process.env, NATS_URL: stack.natsUrl, RUNNER_ID: uniqueId("example") },
      encoding: "utf8",
      timeout: 60_000,
    });
    assert.equal(out.status, 0, out.stderr);
    assert.match(out.stdout, /decide: resume incremental/);
    assert.match(out.stdout, /decision: retry_same_session native_session_interrupted/);
  });

  it("retries a publish that fails while NATS restarts with the same message id: one event, one decision", async () => {
    const retries: { eventId: string; attempt: number }[] = [];
    const r = await runner({
      requestTimeout: 1,
      publishDeadline: 120,
      onPublishRetry: (eventId, attempt) => retries.push({ eventId, attempt }),
    });
    const session = newSession("restart");
    await saved(r, session, "same_session_only");
    const inbox = new Inbox(r);
    // Fetching before the server stops: a consumer create still in flight then would time out
    // (seen once); a pull waiting on the consumer says the runner bound it.
    await waitFor(
      () =>
        observer.jsm.consumers.info("CONTINUITY_DECISIONS", r.runnerId).then(
          (info) => info.num_waiting > 0,
          () => false,
        ),
      "the runner fetching from its decisions consumer",
    );
    const runId = uniqueId("run");
    const impatient = await runner({ requestTimeout: 0.3, publishAttempts: 2 });
    await stack.stopNats();
    let reported: Promise<string>;
    try {
      reported = r.reportResumeFailure({ runId, attempt: 1, session, nativeSessionId: "thread-1" });
      await waitFor(() => retries.length >= 2, "two failed publishes while NATS is down");
      // Past its attempts, a publish gives up with Unavailable (and says nothing of the event).
      await assert.rejects(
        impatient.reportResumeFailure({ runId: uniqueId("run"), attempt: 1, session, nativeSessionId: "thread-1" }),
        (err) => err instanceof Unavailable && err.code === "unavailable",
      );
    } finally {
      await stack.startNats();
    }
    const eventId = await reported;
    assert.ok(retries.every((x) => x.eventId === eventId), "every retry carries the same id");
    await stack.waitReady();
    const d = await inbox.next(runId, 1, 60_000);
    assert.equal(d.action, "retry_same_session");
    const subject = subjects.event(r.runnerId, "resume_failed");
    assert.equal(await observer.stored("CONTINUITY_EVENTS", subject), 1, "the stream kept the event once");
    await waitFor(() => observer.classifierIdle(), "the classifier to finish");
    assert.equal(inbox.of(runId).length, 1, "exactly one decision");

    await r.drain();
    await r.closed();
    assert.equal(r.nc.isClosed(), true);
    await inbox.done;
  });
});
