/**
 * The TS SDK under the shipped NATS authorization (deploy/nats/auth.conf, runners issued by
 * `continuity runners add`, the four services under their own users): a runner signs in with its
 * NKey seed and does its whole part through the SDK without the server refusing anything (its
 * outcome, `turn_completed`, included); a runner that claims another's id can neither read that
 * runner's decisions, publish its events (a `resume_failed` or a `turn_completed`) nor make its
 * session requests, and is told so at once (`PermissionDenied`). The services run with tenancy
 * enforced, the runners issued for the tests' tenant.
 */

import assert from "node:assert/strict";
import { after, afterEach, before, describe, it } from "node:test";
import {
  connect,
  PermissionDenied,
  type ArchiveRequest,
  type ConnectOptions,
  type Runner,
} from "../src/index.js";
import { Inbox, Observer } from "./support/inbox.js";
import { newSession, randomKey, Stack, uniqueId, waitFor } from "./support/stack.js";

/** A key of the runners' own, to sign a `turn_completed` (the services need not know it: the
 * authorization is what is tested). */
const SIGNING = { signingKeys: { k1: randomKey() } };

const stack = new Stack();
let observer: Observer;
const runners: Runner[] = [];
/** What the server reported to each runner's connection (permission violations among them). */
const serverErrors = new Map<Runner, string[]>();

/** "At once": well before a request would time out. */
const AT_ONCE_MS = 2_000;

async function runner(runnerId: string, options: Partial<ConnectOptions> = {}): Promise<Runner> {
  const r = await connect({
    servers: stack.natsUrl,
    runnerId,
    nkeySeedFile: stack.seeds[runnerId],
    requestTimeout: 5,
    nakDelay: 0.2,
    ...options,
  });
  runners.push(r);
  const errors: string[] = [];
  serverErrors.set(r, errors);
  void (async () => {
    for await (const status of r.nc.status()) if (status.type === "error") errors.push(status.error.message);
  })();
  return r;
}

async function saved(r: Runner, session: ReturnType<typeof newSession>, policy: "same_session_only" | "allow_replacement_after_resume_failure") {
  return r.commit({
    session, nativeSessionId: "ns-1", adapter: "codex", model: "m", cwd: "/w", cursor: "c1", checkpointPolicy: policy,
  });
}

async function consumerState(name: string) {
  return observer.jsm.consumers.info("CONTINUITY_DECISIONS", name);
}

/** The rejection of `work`, checked to be a PermissionDenied that came within AT_ONCE_MS. */
async function refusedAtOnce(work: () => Promise<unknown>): Promise<PermissionDenied> {
  const started = Date.now();
  const late = Symbol("late");
  let timer: NodeJS.Timeout | undefined;
  // A deadline, so that a refusal the SDK misses fails here rather than hanging the test.
  const deadline = new Promise<typeof late>((ok) => (timer = setTimeout(() => ok(late), AT_ONCE_MS)));
  let caught: unknown = null;
  try {
    caught = await Promise.race([work().then(() => null), deadline]);
  } catch (err) {
    caught = err;
  } finally {
    clearTimeout(timer);
  }
  const elapsed = Date.now() - started;
  assert.notEqual(caught, late, `not refused within ${AT_ONCE_MS} ms`);
  assert.ok(caught instanceof PermissionDenied, `expected PermissionDenied, got ${String(caught)}`);
  assert.equal(caught.status, 403);
  assert.equal(caught.code, "permission_denied");
  assert.ok(elapsed < AT_ONCE_MS, `refused after ${elapsed} ms`);
  return caught;
}

before(async () => {
  await stack.start({
    authorization: { runners: ["runner-a", "runner-b"] },
    // Tenancy as deployed: the runners are issued for the tests' tenant.
    env: { CONTINUITY_RETRY_BACKOFF_S: "1", CONTINUITY_ARCHIVE_TIMEOUT_S: "10", CONTINUITY_TENANCY: "enforced" },
  });
  observer = await Observer.open(stack.natsUrl, stack.credentialsOf("operator"));
});

// Runners of one id share its consumer: each test's runners stop before the next test.
afterEach(async () => {
  await Promise.all(runners.splice(0).map((r) => r.close().catch(() => undefined)));
});

after(async () => {
  await observer?.close();
  await stack.stop();
});

describe("the runner SDK under the shipped NATS authorization", () => {
  it("signs in with its seed and does its whole part, its consumer bound without a lookup", async () => {
    // The default inbox prefix, _INBOX.runner-a, is the only one the account may receive on.
    const r = await runner("runner-a", { createConsumer: false, ...SIGNING });
    const moves: ArchiveRequest[] = [];
    r.serveArchive((request) => {
      moves.push(request);
      return { exit_code: 0, timed_out: false, output: "moved" };
    });
    await r.nc.flush();
    const inbox = new Inbox(r);
    const session = newSession("auth-whole");
    const committed = await saved(r, session, "allow_replacement_after_resume_failure");
    const ready = await r.decide({
      session, adapter: "codex", model: "m", cwd: "/w", latestCursor: "c1", compatibility: "none",
      readyGeneration: null,
    });
    assert.deepEqual([ready.mode, ready.resume_session_id], ["resume", "ns-1"]);
    const runId = uniqueId("run");
    await r.reportResumeFailure({
      runId, attempt: 1, session, nativeSessionId: "ns-1", error: { type: "transport", code: "stream_closed" },
    });
    const d = await inbox.next(runId);
    assert.deepEqual([d.action, d.runner_id, d.epoch], ["open_replacement", "runner-a", committed.epoch + 1]);
    assert.deepEqual(moves.map((m) => m.run_id), [runId]);
    assert.equal((await r.get(session)).state, "archived");
    // The replacement's first turn, the decision's outcome (contract 4.6).
    await r.reportTurnCompleted({ runId, attempt: d.attempt, session, nativeSessionId: "ns-2", harness: { name: "codex" } });
    const rejected = newSession("auth-reject");
    await saved(r, rejected, "same_session_only");
    await r.reject(rejected, "ns-1", "resume_target_missing");
    // Its acknowledgement reached the consumer, and the server refused nothing it did.
    await waitFor(async () => {
      const info = await consumerState("runner-a");
      return info.num_ack_pending === 0 && info.num_pending === 0;
    }, "runner-a's decision acknowledged");
    assert.deepEqual(serverErrors.get(r), []);
  });

  it("with createConsumer left on, the refused lookup binds the operator's consumer as it is", async () => {
    const r = await runner("runner-a");
    const inbox = new Inbox(r);
    const session = newSession("auth-default");
    await saved(r, session, "same_session_only");
    const runId = uniqueId("run");
    await r.reportResumeFailure({ runId, attempt: 1, session, nativeSessionId: "ns-1" });
    assert.equal((await inbox.next(runId)).action, "retry_same_session");
  });

  it("cannot read another runner's decisions or publish its events: PermissionDenied at once", async () => {
    const owner = await runner("runner-b", { createConsumer: false });
    const session = newSession("auth-other");
    await saved(owner, session, "same_session_only");
    const runId = uniqueId("run");
    await owner.reportResumeFailure({ runId, attempt: 1, session, nativeSessionId: "ns-1" });
    await waitFor(async () => (await consumerState("runner-b")).num_pending >= 1, "runner-b's decision waiting");

    // runner-a's own key and inbox, claiming runner-b's id.
    const impostor = await runner("runner-b", {
      nkeySeedFile: stack.seeds["runner-a"], inboxPrefix: "_INBOX.runner-a", createConsumer: false, ...SIGNING,
    });
    const fetchRefused = await refusedAtOnce(async () => {
      for await (const delivery of impostor.decisions()) {
        throw new Error(`a message of runner-b reached runner-a: ${delivery.message.type} ${delivery.message.run_id}`);
      }
    });
    assert.match(fetchRefused.message, /CONSUMER\.MSG\.NEXT\.CONTINUITY_DECISIONS\.runner-b/);
    await refusedAtOnce(() =>
      impostor.reportResumeFailure({ runId: uniqueId("run"), attempt: 1, session, nativeSessionId: "ns-1" }),
    );
    await refusedAtOnce(() => impostor.reportTurnCompleted({ runId, attempt: 1, session, nativeSessionId: "ns-1" }));
    // Nor make session requests as runner-b (contract 10.1): only its own are permitted.
    const asked = await refusedAtOnce(() => impostor.get(session));
    assert.match(asked.message, /continuity\.sessions\.runner-b\.get/);
    // Nothing was delivered to it, and runner-b still gets its decision.
    const info = await consumerState("runner-b");
    assert.deepEqual([info.num_ack_pending, info.num_redelivered, info.delivered.consumer_seq], [0, 0, 0]);
    const d = await new Inbox(owner).next(runId);
    assert.equal(d.runner_id, "runner-b");
  });

  it("refuses requests at once when replies would arrive outside the runner's inbox prefix", async () => {
    const r = await runner("runner-a", { inboxPrefix: "_INBOX" });
    await refusedAtOnce(() => r.get(newSession("auth-inbox")));
  });
});
