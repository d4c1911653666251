/**
 * `runner.recover` against the four running services: a failure the harness's rules classify is
 * reported with a command result signed with its class, and decided by that class's row; an
 * unclassified one as today; a session the probe finds absent is rejected (`resume_target_missing`)
 * and the next decision starts fresh; an outcome that is not a failure sends nothing; an outcome
 * over the bound is refused before anything is sent. The sessions' files are made in a temporary
 * HOME given to the probe, as the shipped table lays them out.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { connect, harness, InvalidRequest, subjects, type ResumeFailed, type Runner, type SessionRef } from "../src/index.js";
import { Inbox, Observer } from "./support/inbox.js";
import { newSession, randomKey, ROOT, Stack, uniqueId, waitFor } from "./support/stack.js";

const KEY = randomKey();
const stack = new Stack();
let observer: Observer;
let runner: Runner;
let inbox: Inbox;
const homes = mkdtempSync(join(tmpdir(), "continuity-recover-"));
const CWD = "/workspace/app";

interface Case {
  id: string;
  harness: string;
  outcome: harness.Outcome;
  expect: harness.Assessment;
}
let corpusCases: Case[] | null = null;
/** The shared corpus's cases, read when a test first needs them. */
function cases(): Case[] {
  corpusCases ??= (JSON.parse(readFileSync(join(ROOT, "sdk", "harness-corpus.json"), "utf8")) as { cases: Case[] }).cases;
  return corpusCases;
}

/** A case of the shared corpus of `className` for a harness that keeps session files (a CLI). */
function caseOf(className: harness.HarnessClass | null): Case {
  const found = cases().find((c) => c.expect.failure_class === className && harness.adapter(c.harness).spec.sessions !== null);
  assert.ok(found, `the corpus has a case of ${className} for a harness with session files`);
  return found;
}

/** A session id of `adapter`'s harness. */
function sessionIdOf(adapter: harness.Adapter): string {
  for (const id of [randomUUID(), `ses_${randomUUID().replace(/-/g, "").slice(0, 26)}`, `thread-${randomUUID()}`]) {
    if (adapter.isSessionId(id)) return id;
  }
  throw new Error(`no sample session id for ${adapter.name}`);
}

/** A fresh HOME, with the session's file where the table's first path says when `present`. */
function home(adapter: harness.Adapter, sessionId: string, present: boolean): Record<string, string> {
  const dir = mkdtempSync(join(homes, "home-"));
  const sessions = adapter.spec.sessions!;
  const env = { HOME: dir };
  if (present) {
    const root = harness.sessionsRoot(sessions, env)!;
    const key = sessions.cwd_key === null ? "" : harness.cwdKey(sessions.cwd_key, CWD);
    const path = join(root, sessions.paths[0]!.replaceAll("{session_id}", sessionId).replaceAll("{cwd_key}", key).replaceAll("*", "x"));
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, "{}\n");
  }
  return env;
}

async function saved(session: SessionRef, nativeSessionId: string, adapter: harness.Adapter) {
  return runner.commit({
    session, nativeSessionId, adapter: adapter.name, model: "model-1", cwd: CWD, cursor: "c-1",
    checkpointPolicy: "same_session_only",
  });
}

before(async () => {
  await stack.start({ runnerKeys: { k1: KEY }, env: { CONTINUITY_RETRY_BACKOFF_S: "1" } });
  observer = await Observer.open(stack.natsUrl);
  runner = await connect({ servers: stack.natsUrl, runnerId: uniqueId("sdkts"), signingKeys: { k1: KEY }, requestTimeout: 5 });
  inbox = new Inbox(runner);
});

after(async () => {
  await runner?.close().catch(() => undefined);
  await observer?.close();
  await stack.stop();
  rmSync(homes, { recursive: true, force: true });
});

/** The latest event the runner published, as the events stream keeps it. */
async function lastEvent(): Promise<ResumeFailed> {
  const stored = await observer.jsm.streams.getMessage("CONTINUITY_EVENTS", {
    last_by_subj: subjects.event(runner.runnerId, "resume_failed"),
  });
  assert.ok(stored, "an event was stored");
  return stored.json<ResumeFailed>();
}

/** How many events the runner has published. */
function eventsSent(): Promise<number> {
  return observer.stored("CONTINUITY_EVENTS", subjects.event(runner.runnerId, "resume_failed"));
}

describe("runner.recover against the services", () => {
  // The class of each closed row a harness rule can name, and the decision it must get.
  const rows: [harness.HarnessClass, string, string, string][] = [
    ["session_busy", "retry_same_session", "native_session_busy", "4.4.13"],
    ["context_overflow", "operator", "native_context_overflow", "4.4.11"],
    ["transcript_corrupt", "operator", "native_transcript_corrupt", "4.4.12"],
    ["native_session_missing", "continue_fresh", "native_session_missing", "4.4.10"],
    ["unclassified", "retry_same_session", "native_session_interrupted", "4.4.9"],
  ];
  for (const [className, action, reason, row] of rows) {
    it(`reports ${className} with a signed class: ${action} by row ${row}`, async (t) => {
      const c = cases().find((k) => k.expect.failure_class === className);
      if (c === undefined) return t.skip(`no corpus case of ${className}`);
      const adapter = harness.adapter(c.harness);
      const nativeSessionId = sessionIdOf(adapter);
      const env = adapter.spec.sessions === null ? {} : home(adapter, nativeSessionId, true);
      const session = newSession(`recover-${className.replace(/_/g, "-")}`);
      await saved(session, nativeSessionId, adapter);
      const runId = uniqueId("run");
      const verdict = await runner.recover(adapter, c.outcome, { runId, attempt: 1, session, nativeSessionId, cwd: CWD, env });
      assert.ok(verdict instanceof harness.Reported, `${c.id}: ${verdict.kind}`);
      assert.deepEqual([verdict.kind, verdict.failure_class, verdict.rule], ["reported", className, c.expect.rule]);
      assert.equal(verdict.presence, adapter.spec.sessions === null ? "unknown" : "present");
      const d = await inbox.next(runId);
      assert.deepEqual([d.action, d.reason, d.failure_class, d.rule], [action, reason, className, row]);
      // What was sent: the class in the signed result (none for unclassified), never in the error.
      const sent = await lastEvent();
      assert.equal(sent.event_id, verdict.event_id);
      assert.equal(sent.error, null);
      assert.deepEqual(
        [sent.command_result?.command, sent.command_result?.status, sent.command_result?.classification],
        [`${adapter.name}.resume`, "failed", className === "unclassified" ? null : className],
      );
      if (className === "native_session_missing") {
        assert.equal((await runner.get(session)).state, "rejected");
        const next = await runner.decide({ session, adapter: adapter.name, model: "model-1", cwd: CWD });
        assert.deepEqual([next.mode, next.transcript, next.reason], ["fresh", "full", "resume_target_rejected"]);
      }
    });
  }

  it("rejects a session the probe finds absent: no report, and the next decision is fresh", async () => {
    const c = caseOf("native_session_missing");
    const adapter = harness.adapter(c.harness);
    const nativeSessionId = sessionIdOf(adapter);
    const env = home(adapter, nativeSessionId, false);
    assert.equal(await adapter.probe(nativeSessionId, { cwd: CWD, env }), "absent");
    const session = newSession("recover-absent");
    await saved(session, nativeSessionId, adapter);
    const sent = await eventsSent();
    const runId = uniqueId("run");
    const verdict = await runner.recover(adapter, c.outcome, { runId, attempt: 1, session, nativeSessionId, cwd: CWD, env });
    assert.ok(verdict instanceof harness.Rejected, verdict.kind);
    assert.deepEqual(
      [verdict.kind, verdict.code, verdict.failure_class, verdict.rule, verdict.cleared],
      ["rejected", "resume_target_missing", "native_session_missing", c.expect.rule, true],
    );
    assert.equal(await eventsSent(), sent, "no resume_failed was sent");
    assert.equal((await runner.get(session)).state, "rejected");
    const next = await runner.decide({ session, adapter: adapter.name, model: "model-1", cwd: CWD });
    assert.deepEqual([next.mode, next.transcript, next.reason], ["fresh", "full", "resume_target_rejected"]);
  });

  it("rejects an id that is not one of the harness's without looking; reports without the probe when told", async () => {
    const c = caseOf("native_session_missing");
    const adapter = harness.adapter(c.harness);
    const session = newSession("recover-foreign");
    const foreign = "thread-1"; // a contract token, not a session id of this harness
    assert.ok(!adapter.isSessionId(foreign));
    await saved(session, foreign, adapter);
    const env = home(adapter, foreign, false);
    const rejected = await runner.recover(adapter, c.outcome, { runId: uniqueId("run"), attempt: 1, session, nativeSessionId: foreign, cwd: CWD, env });
    assert.ok(rejected instanceof harness.Rejected);
    assert.equal(rejected.cleared, true);
    // probeFirst false: the absent session is reported all the same, its decision by the class's row.
    const other = newSession("recover-unprobed");
    const nativeSessionId = sessionIdOf(adapter);
    await saved(other, nativeSessionId, adapter);
    const runId = uniqueId("run");
    const args = { runId, attempt: 1, session: other, nativeSessionId, cwd: CWD, env: home(adapter, nativeSessionId, false) };
    const reported = await runner.recover(adapter, c.outcome, { ...args, probeFirst: false });
    assert.ok(reported instanceof harness.Reported);
    assert.equal(reported.presence, null);
    assert.equal((await inbox.next(runId)).rule, "4.4.10");
  });

  it("refuses bad arguments before the probe looks or anything is sent", async () => {
    const c = caseOf("native_session_missing");
    const adapter = harness.adapter(c.harness);
    const session = newSession("recover-bad");
    const nativeSessionId = sessionIdOf(adapter);
    const good = { runId: uniqueId("run"), attempt: 1, session, nativeSessionId, cwd: CWD, env: home(adapter, nativeSessionId, false) };
    const sent = await eventsSent();
    const bad: [Partial<harness.RecoverArgs>, string][] = [
      [{ runId: "run 1" }, "run_id"],
      [{ attempt: 0 }, "attempt"],
      [{ nativeSessionId: "a/b" }, "native_session_id"],
      [{ session: { ...session, tenant: "" } }, "session.tenant"],
    ];
    for (const [change, field] of bad) {
      await assert.rejects(runner.recover(adapter, c.outcome, { ...good, ...change }), (err) => {
        assert.ok(err instanceof InvalidRequest, field);
        assert.equal(err.field, field);
        return true;
      });
    }
    await assert.rejects(runner.get(session), (err) => err instanceof Error && err.name === "NotFound"); // no reject made a record
    assert.equal(await eventsSent(), sent);
  });

  it("sends nothing for an outcome that is not a failure, nor for one over the bound", async () => {
    const c = caseOf(null);
    const adapter = harness.adapter(c.harness);
    const session = newSession("recover-none");
    const sent = await eventsSent();
    const args = { runId: uniqueId("run"), attempt: 1, session, nativeSessionId: sessionIdOf(adapter), cwd: CWD, env: {} };
    const verdict = await runner.recover(adapter, c.outcome, args);
    assert.ok(verdict instanceof harness.NotAFailure);
    assert.deepEqual([verdict.kind, verdict.rule], ["not_a_failure", c.expect.rule]);
    const big = { exit_code: 1, stdout: "x".repeat(4 * 1024 * 1024), stderr: "y" };
    await assert.rejects(runner.recover(adapter, big, args), (err) => err instanceof InvalidRequest && err.code === "payload_too_large");
    await waitFor(() => observer.classifierIdle(), "the classifier to be idle");
    assert.equal(await eventsSent(), sent);
  });
});

describe("compatibility components through commit and decide", () => {
  const values: harness.ComponentValues = {
    executable: harness.executable("claude-code", "2.1.332"),
    protocol: "stream-json",
    model_route: "anthropic/claude-sonnet-4",
    mcp_servers: ["github", "linear"],
    cwd: "/workspace/app/",
  };

  it("commits a Components with the generation it makes; a decide names the components that changed", async () => {
    const adapter = { name: "claude-code" };
    const session = newSession("components");
    const saved = new harness.Components(values);
    await runner.commit({
      session, nativeSessionId: randomUUID(), adapter: adapter.name, model: "model-1", cwd: CWD, cursor: "c-1",
      checkpointPolicy: "same_session_only", compatibilityComponents: saved,
    });
    const decide = (ready: harness.Components) =>
      runner.decide({ session, adapter: adapter.name, model: "model-1", cwd: CWD, latestCursor: "c-1", compatibility: "profile-ready", readyComponents: ready });
    // The same components in another order and spelling of the path: the same generation.
    const same = await decide(new harness.Components({ ...values, mcp_servers: ["linear", "github", "github"], cwd: "/workspace//app" }));
    assert.deepEqual([same.mode, same.generation], ["resume", "matched"]);
    const changed = await decide(new harness.Components({ ...values, model_route: "openai/gpt-5", mcp_servers: ["github"] }));
    assert.deepEqual([changed.mode, changed.reason, changed.generation], ["fresh", "compatibility_generation_changed", "changed"]);
    assert.deepEqual(changed.changed_components, ["mcp_servers", "model_route"]);
    // Digests instead of a Components are the same thing on the wire.
    const byDigests = await runner.decide({
      session, adapter: adapter.name, model: "model-1", cwd: CWD, latestCursor: "c-1", compatibility: "profile-ready",
      readyComponents: saved.digests(), readyGeneration: saved.generation,
    });
    assert.equal(byDigests.mode, "resume");
  });

  it("refuses, before sending, components that do not make the generation given", async () => {
    const session = newSession("components-bad");
    const components = new harness.Components(values);
    const args = {
      session, nativeSessionId: randomUUID(), adapter: "claude-code", model: "model-1", cwd: CWD,
      checkpointPolicy: "same_session_only" as const,
    };
    const refused = (field: string) => (err: unknown) => err instanceof InvalidRequest && err.field === field;
    await assert.rejects(
      runner.commit({ ...args, compatibilityComponents: components, compatibilityGeneration: "0".repeat(64) }),
      refused("compatibility_components"),
    );
    await assert.rejects(runner.commit({ ...args, compatibilityComponents: {} }), refused("compatibility_components"));
    await assert.rejects(
      runner.commit({ ...args, compatibilityComponents: { model: "0".repeat(64) } as never }),
      refused("compatibility_components.model"),
    );
    await assert.rejects(
      runner.decide({ session, adapter: "claude-code", model: "m", cwd: CWD, readyComponents: { cwd: "ABC" } }),
      refused("ready_components.cwd"),
    );
    await assert.rejects(runner.get(session), (err) => err instanceof Error && err.name === "NotFound"); // nothing written
  });
});
