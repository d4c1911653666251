/** decide / commit / reject / get / claim against the running session-store, on the runner's own
 * subjects, with their typed errors. */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  ClaimRefused,
  connect,
  ContinuityError,
  InvalidRequest,
  RequestTimeout,
  NotFound,
  RevisionConflict,
  Runner,
  SessionNotOwned,
  subjects,
  Unavailable,
  type CommitArgs,
  type SessionRef,
} from "../src/index.js";
import { connect as natsConnect } from "@nats-io/transport-node";
import { newSession, Stack, waitFor } from "./support/stack.js";

const stack = new Stack();
let runner: Runner;

function saved(session: SessionRef, overrides: Partial<CommitArgs> = {}): CommitArgs {
  return {
    session,
    nativeSessionId: "thread-1",
    adapter: "codex",
    model: "gpt-5-codex",
    cwd: "/workspace/app",
    cursor: "c-10",
    checkpointPolicy: "same_session_only",
    compatibilityGeneration: "dsh-2026.11.3-p7",
    ...overrides,
  };
}

function asked(session: SessionRef, latestCursor = "c-10") {
  return {
    session,
    adapter: "codex",
    model: "gpt-5-codex",
    cwd: "/workspace/app",
    latestCursor,
    compatibility: "profile-ready" as const,
    readyGeneration: "dsh-2026.11.3-p7",
  };
}

before(async () => {
  await stack.start();
  runner = await connect({ servers: stack.natsUrl, runnerId: "sdkts-sessions", requestTimeout: 5 });
});

after(async () => {
  await runner?.close();
  await stack.stop();
});

describe("session requests", () => {
  it("decides fresh without a record, resumes after a commit, and shows the record", async () => {
    const session = newSession("resume");
    const first = await runner.decide(asked(session));
    assert.equal(first.mode, "fresh");
    assert.equal(first.reason, "no_session");
    assert.equal(first.transcript, "full");
    // The clause of contract 3.3 that answered, the policy's version, how the generations compared.
    assert.deepEqual([first.rule, first.policy, first.generation], ["3.3.1a", "shipped-1", "not_compared"]);

    const committed = await runner.commit(saved(session));
    assert.equal(committed.revision, 1);

    const again = await runner.decide(asked(session));
    assert.deepEqual(
      { mode: again.mode, id: again.resume_session_id, transcript: again.transcript, reason: again.reason },
      { mode: "resume", id: "thread-1", transcript: "incremental", reason: null },
    );
    assert.deepEqual([again.rule, again.policy, again.generation], ["3.3.4", "shipped-1", "matched"]);

    const view = await runner.get(session);
    assert.equal(view.native_session_id, "thread-1");
    assert.equal(view.state, "active");
    assert.equal(view.has_generation, true);
    assert.equal(view.generation_trusted, true);
    assert.equal(JSON.stringify(view).includes("dsh-2026"), false, "a generation value is never shown");

    const advanced = await runner.decide(asked(session, "c-11"));
    assert.equal(advanced.reason, "conversation_advanced");
    assert.equal(advanced.rule, "3.3.2d");
  });

  it("names the runner in each request's subject; the session is its own, claims are refused", async () => {
    const overheard: string[] = [];
    const listener = await natsConnect({ servers: stack.natsUrl });
    const other = await connect({ servers: stack.natsUrl, runnerId: "sdkts-other", requestTimeout: 5 });
    try {
      listener.subscribe("continuity.sessions.>", { callback: (_err, msg) => void overheard.push(msg.subject) });
      await listener.flush();
      const session = newSession("subjects");
      await runner.decide(asked(session));
      await runner.commit(saved(session));
      assert.equal((await runner.get(session)).owner, "sdkts-sessions");
      await runner.reject(session, "thread-0", "resume_target_missing");
      await assert.rejects(runner.claim(session), (err) => {
        assert.ok(err instanceof ClaimRefused, `got ${String(err)}`); // the services' default policy
        assert.deepEqual([err.status, err.code], [409, "claim_refused"]);
        return true;
      });
      const ops = ["decide", "commit", "get", "reject", "claim"] as const;
      await waitFor(() => overheard.length >= ops.length, "the requests overheard");
      assert.deepEqual(overheard, ops.map((op) => `continuity.sessions.sdkts-sessions.${op}`));
      // Even with tenancy open, the first commit bound the session to its runner.
      await assert.rejects(other.commit(saved(session, { nativeSessionId: "thread-other" })), (err) => {
        assert.ok(err instanceof SessionNotOwned, `got ${String(err)}`);
        assert.deepEqual([err.status, err.code], [409, "session_not_owned"]);
        return true;
      });
      await assert.rejects(other.get(session), (err) => err instanceof NotFound);
    } finally {
      await other.close();
      await listener.close();
    }
  });

  it("raises RevisionConflict, writing nothing", async () => {
    const session = newSession("conflict");
    const { revision } = await runner.commit(saved(session));
    await assert.rejects(runner.commit(saved(session, { expectedRevision: revision + 5, cursor: "c-99" })), (err) => {
      assert.ok(err instanceof RevisionConflict);
      assert.ok(err instanceof ContinuityError);
      assert.equal(err.status, 409);
      assert.equal(err.code, "revision_conflict");
      return true;
    });
    const view = await runner.get(session);
    assert.equal(view.cursor, "c-10");
    assert.equal(view.revision, revision);
    const next = await runner.commit(saved(session, { expectedRevision: revision, cursor: "c-11" }));
    assert.equal(next.revision, revision + 1);
  });

  it("rejects a missing resume target: the next decision reseeds once", async () => {
    const session = newSession("reject");
    await runner.commit(saved(session));
    assert.deepEqual(await runner.reject(session, "thread-other", "resume_target_missing"), { cleared: false });
    assert.deepEqual(await runner.reject(session, "thread-1", "resume_target_corrupt"), { cleared: true });
    const reply = await runner.decide(asked(session));
    assert.equal(reply.mode, "fresh");
    assert.equal(reply.reason, "resume_target_rejected");
    assert.equal(reply.rule, "3.3.1d");
    assert.equal((await runner.get(session)).state, "rejected");
  });

  it("raises NotFound for an unknown session and InvalidRequest for a bad field", async () => {
    await assert.rejects(runner.get(newSession("absent")), (err) => {
      assert.ok(err instanceof NotFound);
      assert.equal(err.status, 404);
      assert.equal(err.code, "not_found");
      return true;
    });
    const bad = { tenant: "no spaces allowed", conversation_id: "c", agent_id: "a" };
    await assert.rejects(runner.get(bad), (err) => {
      assert.ok(err instanceof InvalidRequest);
      assert.equal(err.status, 400);
      assert.equal(err.code, "invalid_field");
      assert.equal(err.message.includes("no spaces allowed"), false, "the value is not echoed");
      return true;
    });
  });

  it("raises Unavailable while Redis is down, and works again after it is back", async () => {
    const session = newSession("redis");
    await runner.commit(saved(session));
    await stack.stopRedis();
    try {
      await assert.rejects(runner.get(session), (err) => {
        assert.ok(err instanceof Unavailable, `got ${String(err)}`);
        assert.equal(err.status, 503);
        assert.equal(err.code, "unavailable");
        return true;
      });
    } finally {
      await stack.startRedis();
    }
    // The record lived only in that Redis (no persistence here): it is gone, and NotFound says so.
    await waitFor(
      async () => runner.get(session).then(() => "found", (err: unknown) => (err instanceof NotFound ? "absent" : false)),
      "the session-store to answer again",
    );
  });

  it("raises Unavailable when no session-store answers, and RequestTimeout when an answer never comes", async () => {
    await stack.stopService("session-store");
    const session = newSession("gone");
    await assert.rejects(runner.get(session), (err) => {
      assert.ok(err instanceof Unavailable, `got ${String(err)}`);
      assert.equal(err.code, "unavailable");
      return true;
    });
    const silent = await natsConnect({ servers: stack.natsUrl });
    try {
      // Takes the runner's requests and never answers.
      silent.subscribe(subjects.sessions("sdkts-timeout", "get"), { callback: () => undefined });
      await silent.flush();
      const slow = await connect({ servers: stack.natsUrl, runnerId: "sdkts-timeout", requestTimeout: 0.3 });
      try {
        await assert.rejects(slow.get(session), (err) => {
          assert.ok(err instanceof RequestTimeout, `got ${String(err)}`);
          assert.equal(err.code, "timeout");
          return true;
        });
      } finally {
        await slow.close();
      }
    } finally {
      await silent.close();
    }
  });
});
