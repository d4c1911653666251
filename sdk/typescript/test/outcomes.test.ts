/**
 * Outcomes (contract 4.6) against real servers: `reportTurnCompleted` publishes on
 * `continuity.events.<runnerId>.turn_completed` an event the services decode as their own
 * `TurnCompleted` (the project's Python decodes it here, with `shared.contract`), whose result
 * verifies under the runner's key with the services' own check; a bad argument is refused before
 * anything is sent; `reportResumeFailure` and `runner.recover` name the harness; and `recover`
 * sends a `turn_completed` for an outcome that is not a failure only when told the attempt of the
 * decision the resume followed. The stack runs without its classifier: the events stay in
 * CONTINUITY_EVENTS as they were sent.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  connect,
  EVENTS_STREAM,
  harness,
  InvalidRequest,
  subjects,
  TURN_COMMAND,
  TURN_STATUS,
  type HarnessInfo,
  type Runner,
  type TurnCompletedArgs,
} from "../src/index.js";
import { Observer } from "./support/inbox.js";
import { newSession, randomKey, ROOT, Stack, uniqueId } from "./support/stack.js";

const KEY = randomKey();
const KEY_ID = "k1";
const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const CLAUDE: HarnessInfo = { name: "claude-code", version: "2.1.332" };
const stack = new Stack();
let observer: Observer;
let runner: Runner;

interface Case {
  id: string;
  harness: string;
  outcome: harness.Outcome;
  expect: harness.Assessment;
}
const CASES = new Map(
  (JSON.parse(readFileSync(join(ROOT, "sdk", "harness-corpus.json"), "utf8")) as { cases: Case[] }).cases.map((c) => [c.id, c]),
);
function corpus(id: string): Case {
  const found = CASES.get(id);
  assert.ok(found, id);
  return found;
}
const SUCCESS = corpus("claude-code.fp.answer-quotes-missing"); // a successful turn quoting an error
const FAILURE = corpus("claude-code.background-agent"); // session_busy

before(async () => {
  // The streams are made by the services that start; the classifier never starts here.
  await stack.start({ runnerKeys: { [KEY_ID]: KEY }, later: ["classifier"] });
  observer = await Observer.open(stack.natsUrl);
  runner = await connect({ servers: stack.natsUrl, runnerId: uniqueId("outcomes"), signingKeys: { [KEY_ID]: KEY }, publishAttempts: 1 });
});

after(async () => {
  await runner?.close().catch(() => undefined);
  await observer?.close();
  await stack.stop();
});

interface Stored {
  seq: number;
  subject: string;
  msgId: string | undefined;
  traceparent: string | undefined;
  data: string;
}

/** The last event the runner published of `type`, as the events stream keeps it. */
async function last(type: "turn_completed" | "resume_failed", who: Runner = runner): Promise<Stored> {
  const stored = await observer.jsm.streams.getMessage(EVENTS_STREAM, { last_by_subj: subjects.event(who.runnerId, type) });
  assert.ok(stored, `a ${type} was stored`);
  return {
    seq: stored.seq,
    subject: stored.subject,
    msgId: stored.header.get("Nats-Msg-Id") || undefined,
    traceparent: stored.header.get("traceparent") || undefined,
    data: stored.string(),
  };
}

/** How many events of `type` the runner has in the stream. */
function count(type: "turn_completed" | "resume_failed", who: Runner = runner): Promise<number> {
  return observer.stored(EVENTS_STREAM, subjects.event(who.runnerId, type));
}

async function counts(who: Runner = runner): Promise<[number, number]> {
  return [await count("turn_completed", who), await count("resume_failed", who)];
}

interface ServerView {
  event: Record<string, unknown> & { harness: HarnessInfo | null; attempt: number; run_id: string; event_id: string };
  /** `shared.contract.signing.verify` of the signed result under the runner's key. */
  verdict: string | null;
}

const SERVER_VIEW = `
import base64, json, sys
import msgspec
from shared.contract import ResumeFailed, TurnCompleted
from shared.contract.signing import verify
ask = json.load(sys.stdin)
kind = {"turn_completed": TurnCompleted, "resume_failed": ResumeFailed}[ask["type"]]
event = msgspec.json.decode(ask["data"].encode(), type=kind)
result = event.result if isinstance(event, TurnCompleted) else event.command_result
keys = {ask["key_id"]: base64.b64decode(ask["key"])}
verdict = None if result is None else verify(keys, event.runner_id, event.run_id, event.attempt, result).value
print(json.dumps({"event": msgspec.to_builtins(event), "verdict": verdict}))
`;

/** The stored event as the services decode it (their own Structs), and their verdict on its
 * signature: a decoding the services would refuse fails here. */
function serverView(type: "turn_completed" | "resume_failed", data: string): ServerView {
  const ask = JSON.stringify({ type, data, key_id: KEY_ID, key: Buffer.from(KEY).toString("base64") });
  const out = spawnSync(join(ROOT, ".venv", "bin", "python"), ["-c", SERVER_VIEW], { cwd: ROOT, input: ask, encoding: "utf8", timeout: 60_000 });
  assert.equal(out.status, 0, out.stderr);
  return JSON.parse(out.stdout) as ServerView;
}

function refusedAt(field: string) {
  return (err: unknown) => {
    assert.ok(err instanceof InvalidRequest, String(err));
    assert.equal(err.field, field, err.message);
    return true;
  };
}

describe("reportTurnCompleted", () => {
  it("publishes on the turn_completed subject an event the services decode, signed turn/completed under the runner's key", async () => {
    const session = newSession("turn");
    const runId = uniqueId("run");
    const eventId = await runner.reportTurnCompleted({ runId, attempt: 2, session, nativeSessionId: "ns-1", harness: CLAUDE, traceparent: TRACEPARENT });
    const stored = await last("turn_completed");
    assert.equal(stored.subject, `continuity.events.${runner.runnerId}.turn_completed`);
    assert.deepEqual([stored.msgId, stored.traceparent], [eventId, TRACEPARENT]);
    const { event, verdict } = serverView("turn_completed", stored.data);
    assert.equal(verdict, "valid");
    assert.deepEqual(
      [event.type, event.event_id, event.runner_id, event.run_id, event.attempt, event.native_session_id],
      ["turn_completed", eventId, runner.runnerId, runId, 2, "ns-1"],
    );
    assert.deepEqual(event.session, session);
    assert.deepEqual(event.harness, CLAUDE);
    const result = event.result as Record<string, unknown>;
    assert.deepEqual([result.command, result.status, result.classification, result.key_id], ["turn", "completed", null, KEY_ID]);
    assert.deepEqual([TURN_COMMAND, TURN_STATUS], ["turn", "completed"]);
    // Signed for that run and attempt: under another attempt the services' check fails.
    const moved = JSON.stringify({ ...(JSON.parse(stored.data) as object), attempt: 1 });
    assert.equal(serverView("turn_completed", moved).verdict, "signature_invalid");
  });

  it("sends harness null without one, keeps a given event id, and the stream keeps one copy of a retry", async () => {
    const runId = uniqueId("run");
    const args: TurnCompletedArgs = { runId, attempt: 1, session: newSession("turn"), nativeSessionId: "ns-2", eventId: "evt-given-1" };
    const before = await count("turn_completed");
    assert.equal(await runner.reportTurnCompleted(args), "evt-given-1");
    assert.equal(await runner.reportTurnCompleted(args), "evt-given-1");
    assert.equal(await count("turn_completed"), before + 1);
    const stored = await last("turn_completed");
    assert.equal((JSON.parse(stored.data) as { harness: unknown }).harness, null);
    const { event, verdict } = serverView("turn_completed", stored.data);
    assert.deepEqual([event.event_id, event.harness, verdict], ["evt-given-1", null, "valid"]);
  });

  it("is sent again by resend under a new id, with the same signed result", async () => {
    const runId = uniqueId("run");
    const first = await runner.reportTurnCompleted({ runId, attempt: 3, session: newSession("turn"), nativeSessionId: "ns-3", harness: CLAUDE });
    const one = JSON.parse((await last("turn_completed")).data) as Record<string, unknown>;
    const again = await runner.resend(first);
    assert.notEqual(again, first);
    const stored = await last("turn_completed");
    const two = JSON.parse(stored.data) as Record<string, unknown>;
    assert.equal(two.event_id, again);
    assert.deepEqual([two.result, two.occurred_at], [one.result, one.occurred_at]);
    assert.equal(serverView("turn_completed", stored.data).verdict, "valid");
  });

  const bad: [string, Partial<TurnCompletedArgs> & Record<string, unknown>, string][] = [
    ["run id", { runId: "a run id with spaces" }, "run_id"],
    ["attempt 0", { attempt: 0 }, "attempt"],
    ["attempt over the limit", { attempt: 1001 }, "attempt"],
    ["attempt not an integer", { attempt: 1.5 }, "attempt"],
    ["native session id", { nativeSessionId: "a/b" }, "native_session_id"],
    ["tenant", { session: { tenant: "a tenant", conversation_id: "c", agent_id: "a" } }, "session.tenant"],
    ["harness name", { harness: { name: "Claude Code" } }, "harness.name"],
    ["harness version", { harness: { name: "claude-code", version: "-1" } }, "harness.version"],
    ["harness not an object", { harness: "claude-code" as unknown as HarnessInfo }, "harness"],
    ["event id", { eventId: "evt/1" }, "event_id"],
    ["traceparent", { traceparent: "00-not-a-trace" }, "traceparent"],
  ];
  for (const [name, changes, field] of bad) {
    it(`refuses a bad ${name} before anything is sent`, async () => {
      const before = await counts();
      const args = { runId: uniqueId("run"), attempt: 1, session: newSession("bad"), nativeSessionId: "ns-1", ...changes } as TurnCompletedArgs;
      await assert.rejects(runner.reportTurnCompleted(args), refusedAt(field));
      assert.deepEqual(await counts(), before);
    });
  }

  it("refuses without a signing key, before anything is sent", async () => {
    const keyless = await connect({ servers: stack.natsUrl, runnerId: uniqueId("outcomes") });
    try {
      const args = { runId: uniqueId("run"), attempt: 1, session: newSession("keyless"), nativeSessionId: "ns-1" };
      await assert.rejects(keyless.reportTurnCompleted(args), refusedAt("signingKeys"));
      assert.deepEqual(await counts(keyless), [0, 0]);
    } finally {
      await keyless.close();
    }
  });
});

describe("the harness on resume_failed", () => {
  it("is sent when given, and refused before anything is sent when it breaks the contract", async () => {
    const eventId = await runner.reportResumeFailure({ runId: uniqueId("run"), attempt: 1, session: newSession("rf"), nativeSessionId: "ns-1", harness: CLAUDE });
    const { event } = serverView("resume_failed", (await last("resume_failed")).data);
    assert.deepEqual([event.event_id, event.harness], [eventId, CLAUDE]);
    const before = await counts();
    const broken = { runId: uniqueId("run"), attempt: 1, session: newSession("rf"), nativeSessionId: "ns-1", harness: { name: "x y" } };
    await assert.rejects(runner.reportResumeFailure(broken), refusedAt("harness.name"));
    assert.deepEqual(await counts(), before);
  });
});

describe("runner.recover and outcomes", () => {
  it("sends nothing for a successful resume unless told the decided attempt, then a turn_completed for it", async () => {
    const adapter = harness.adapter("claude-code");
    const args = { runId: uniqueId("run"), attempt: 2, session: newSession("recover-ok"), nativeSessionId: randomUUID() };
    const before = await counts();
    const untold = await runner.recover(adapter, SUCCESS.outcome, args);
    assert.ok(untold instanceof harness.NotAFailure);
    assert.deepEqual([untold.kind, untold.rule, untold.reported_event_id], ["not_a_failure", SUCCESS.expect.rule, null]);
    assert.deepEqual(await counts(), before);

    const told = await runner.recover(adapter, SUCCESS.outcome, { ...args, decidedAttempt: 1, harnessVersion: "2.1.332", traceparent: TRACEPARENT });
    assert.ok(told instanceof harness.NotAFailure);
    assert.equal(told.rule, SUCCESS.expect.rule);
    assert.ok(told.reported_event_id !== null);
    assert.deepEqual(await counts(), [before[0] + 1, before[1]]);
    const stored = await last("turn_completed");
    assert.equal(stored.traceparent, TRACEPARENT);
    const { event, verdict } = serverView("turn_completed", stored.data);
    assert.deepEqual(
      [event.event_id, event.run_id, event.attempt, event.native_session_id, verdict],
      [told.reported_event_id, args.runId, 1, args.nativeSessionId, "valid"],
    );
    assert.deepEqual(event.harness, CLAUDE);
  });

  it("names the harness on a failed resume's resume_failed and sends no turn_completed", async () => {
    const before = await counts();
    const runId = uniqueId("run");
    const verdict = await runner.recover(harness.adapter("claude-code"), FAILURE.outcome, {
      runId, attempt: 2, session: newSession("recover-failed"), nativeSessionId: randomUUID(), probeFirst: false,
      decidedAttempt: 1, harnessVersion: "2.1.332",
    });
    assert.ok(verdict instanceof harness.Reported);
    assert.equal(verdict.failure_class, "session_busy");
    assert.deepEqual(await counts(), [before[0], before[1] + 1]);
    const { event } = serverView("resume_failed", (await last("resume_failed")).data);
    assert.deepEqual([event.event_id, event.attempt, event.harness], [verdict.event_id, 2, CLAUDE]);

    // Without a version, the harness is named alone.
    const alone = await runner.recover(harness.adapter("codex"), { exit_code: 1, stderr: "Error: something nobody wrote a rule for\n" }, {
      runId: uniqueId("run"), attempt: 1, session: newSession("recover-failed"), nativeSessionId: randomUUID(), probeFirst: false,
    });
    assert.ok(alone instanceof harness.Reported);
    assert.deepEqual(serverView("resume_failed", (await last("resume_failed")).data).event.harness, { name: "codex", version: null });
    assert.equal(await count("turn_completed"), before[0]);
  });

  const bad: [string, Partial<harness.RecoverArgs>, string][] = [
    ["decided attempt 0", { decidedAttempt: 0 }, "decided_attempt"],
    ["decided attempt over the limit", { decidedAttempt: 1001 }, "decided_attempt"],
    ["harness version", { harnessVersion: "v 2" }, "harness.version"],
    ["event id", { eventId: "evt/1", decidedAttempt: 1 }, "event_id"],
  ];
  for (const [name, changes, field] of bad) {
    for (const c of [SUCCESS, FAILURE]) {
      it(`refuses a bad ${name} (${c.expect.failure_class ?? "no failure"}) before anything is sent`, async () => {
        const before = await counts();
        const args = { runId: uniqueId("run"), attempt: 2, session: newSession("recover-bad"), nativeSessionId: randomUUID(), probeFirst: false, ...changes };
        await assert.rejects(runner.recover(harness.adapter("claude-code"), c.outcome, args), refusedAt(field));
        assert.deepEqual(await counts(), before);
      });
    }
  }
});
