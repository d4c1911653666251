/**
 * Every scenario of sdk/scenarios.json (the simulator's catalogue) played through the TS SDK
 * against the four running services, row by row (policy, attempt, governed wait), checking the
 * decision contract 4.4 requires. `garbage` is published as raw bytes on the runner's event
 * subject: the SDK itself only ever builds valid events.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  connect,
  subjects,
  type Action,
  type ArchiveRequest,
  type CheckpointPolicy,
  type CommandResult,
  type ErrorInfo,
  type Runner,
  type ToolCall,
} from "../src/index.js";
import { Inbox, Observer, type DeadLetter } from "./support/inbox.js";
import { newSession, randomKey, ROOT, Stack, uniqueId, waitFor } from "./support/stack.js";

interface Row {
  policy: CheckpointPolicy;
  attempt: number;
  governed_wait_elapsed: boolean;
  action: Action;
  archive_first: boolean;
  reason: string;
  /** The id of the contract 4.4 row that decides it. */
  rule: string;
}

interface Scenario {
  name: string;
  failure_class: string | null;
  pending_tool_call: boolean;
  dead: "quarantine" | "invalid" | null;
  dead_reason: string | null;
  event: {
    error?: ErrorInfo;
    command_result?: { command: string; status: string; classification: string; key: "live" | "wrong" | "unknown" };
    pending_tool_call?: { tool_name: string; recorded_outcome: null };
    resend?: ("same_event_id" | "new_event_id")[];
    raw?: string;
  };
  expect: Row[];
}

const DOC = JSON.parse(readFileSync(join(ROOT, "sdk", "scenarios.json"), "utf8")) as { scenarios: Scenario[] };
const RUNNER_ID = "sdkts-scenarios";
const KEY = randomKey();
const stack = new Stack();
let observer: Observer;
let runner: Runner;
let inbox: Inbox;
const signers: Record<"live" | "wrong" | "unknown", Runner> = {} as never;
const moves = new Map<string, ArchiveRequest>();
const runsPlayed: string[] = [];
let quarantined: DeadLetter[];
let invalid: DeadLetter[];

before(async () => {
  await stack.start({ runnerKeys: { k1: KEY }, env: { CONTINUITY_ARCHIVE_TIMEOUT_S: "10" } });
  observer = await Observer.open(stack.natsUrl);
  quarantined = observer.deadLetters("continuity.dead.quarantine");
  invalid = observer.deadLetters("continuity.dead.invalid");
  await observer.nc.flush();
  runner = await connect({ servers: stack.natsUrl, runnerId: RUNNER_ID, signingKeys: { k1: KEY } });
  runner.serveArchive((request) => {
    moves.set(request.run_id, request);
    return { exit_code: 0, timed_out: false, output: "moved aside" };
  });
  await runner.nc.flush();
  inbox = new Inbox(runner);
  signers.live = runner;
  // The same runner id with other key material: these only sign and publish.
  signers.wrong = await connect({ servers: stack.natsUrl, runnerId: RUNNER_ID, signingKeys: { k1: randomKey() } });
  signers.unknown = await connect({ servers: stack.natsUrl, runnerId: RUNNER_ID, signingKeys: { "k-unknown": KEY } });
});

after(async () => {
  for (const r of [signers.wrong, signers.unknown, runner]) await r?.close().catch(() => undefined);
  await observer?.close();
  await stack.stop();
});

/** Sends the scenario's event for one row; returns the run id. */
async function send(scenario: Scenario, attempt: number, governed: boolean, policy: CheckpointPolicy) {
  const session = newSession(scenario.name);
  const saved = await runner.commit({
    session, nativeSessionId: "thread-1", adapter: "codex", model: "gpt-5-codex", cwd: "/workspace/app",
    cursor: "c-1", checkpointPolicy: policy,
  });
  const runId = uniqueId(`run-${scenario.name}`);
  runsPlayed.push(runId);
  const e = scenario.event;
  if (e.raw !== undefined) {
    observer.nc.publish(subjects.event(RUNNER_ID, "resume_failed"), `${e.raw} ${runId}`);
    await observer.nc.flush();
    return { runId, session, saved, eventId: null };
  }
  const signer = signers[e.command_result?.key ?? "live"];
  let commandResult: CommandResult | null = null;
  if (e.command_result) {
    const { command, status, classification } = e.command_result;
    commandResult = signer.signCommandResult({ runId, attempt, command, status, classification });
  }
  let pendingToolCall: ToolCall | null = null;
  if (e.pending_tool_call) {
    pendingToolCall = { ...e.pending_tool_call, tool_call_id: `tc-${runId}`, started_at: new Date().toISOString() };
  }
  const args = {
    runId, attempt, session, nativeSessionId: "thread-1", error: e.error ?? null, commandResult, pendingToolCall,
    governedWaitElapsed: governed,
  };
  const eventId = await signer.reportResumeFailure(args);
  for (const again of e.resend ?? []) {
    await signer.reportResumeFailure({ ...args, eventId: again === "same_event_id" ? eventId : undefined });
  }
  return { runId, session, saved, eventId };
}

async function play(scenario: Scenario, row: Row): Promise<void> {
  const { runId, session, saved } = await send(scenario, row.attempt, row.governed_wait_elapsed, row.policy);
  const what = `${scenario.name} ${row.policy} attempt ${row.attempt} governed ${row.governed_wait_elapsed}`;
  const d = await inbox.next(runId, 1, 60_000);
  assert.deepEqual(
    { action: d.action, reason: d.reason, rule: d.rule, attempt: d.attempt, failure_class: d.failure_class },
    { action: row.action, reason: row.reason, rule: row.rule, attempt: row.attempt, failure_class: scenario.failure_class },
    what,
  );
  assert.deepEqual(d.session, session, what);
  if (row.archive_first) {
    assert.equal(moves.get(runId)?.native_session_id, "thread-1", `${what}: archived first`);
    assert.equal(d.epoch, saved.epoch + 1, `${what}: the replacement's epoch`);
    assert.equal((await runner.get(session)).state, "archived", what);
  } else {
    assert.equal(moves.has(runId), false, `${what}: nothing archived`);
    const state = (await runner.get(session)).state;
    if (row.action === "retry_same_session") {
      assert.ok(d.not_before, `${what}: not_before`);
      assert.equal(state, "active", what);
    } else {
      assert.equal(state, "held", `${what}: the saved session is held`);
    }
  }
}

async function inParallel<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items];
  const workers = Array.from({ length: limit }, async () => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) await fn(item);
  });
  await Promise.all(workers);
}

describe("the simulator's scenarios through the TS SDK", () => {
  const decided = DOC.scenarios.filter((s) => s.dead === null);
  const dead = DOC.scenarios.filter((s) => s.dead !== null);

  it("lists every scenario, each with the rows it must decide", () => {
    assert.ok(decided.length >= 8 && dead.length >= 3);
    for (const s of decided) assert.equal(s.expect.length, 18, s.name);
    for (const s of dead) assert.equal(s.expect.length, 0, s.name);
  });

  for (const scenario of decided) {
    it(`${scenario.name}: every policy, attempt and governed wait gets its decision`, async () => {
      await inParallel(scenario.expect, 9, (row) => play(scenario, row));
    });
  }

  for (const scenario of dead) {
    it(`${scenario.name}: dead-lettered on continuity.dead.${scenario.dead}, no decision`, async () => {
      const { runId, eventId } = await send(scenario, 1, false, "allow_replacement_after_resume_failure");
      const letters = scenario.dead === "quarantine" ? quarantined : invalid;
      const letter = await waitFor(
        () => letters.find((l) => (eventId ? l.body?.event_id === eventId : l.text.includes(runId))),
        `the dead letter of ${scenario.name}`,
      );
      if (scenario.dead_reason) assert.equal(letter.reason, scenario.dead_reason);
      else assert.ok(letter.reason.length > 0);
      assert.equal((await observer.request("continuity.runs.get", { run_id: runId })).code, "not_found");
    });
  }

  it("pending: an operator's resolution brings continue_fresh with the reconciled outcome", async () => {
    const pending = DOC.scenarios.find((s) => s.name === "pending")!;
    const { runId } = await send(pending, 1, false, "same_session_only");
    assert.equal((await inbox.next(runId)).action, "reconcile");
    await waitFor(
      async () => (await observer.request("continuity.reconciliations.get", { run_id: runId })).code === null,
      "the reconciliation to open",
    );
    const resolved = await observer.request("continuity.reconciliations.resolve", {
      run_id: runId, action_outcome: "not_performed", evidence: "checked the target system", actor: "sdkts-test",
    });
    assert.equal(resolved.code, null);
    const d = await inbox.next(runId, 2);
    assert.deepEqual([d.action, d.reason, d.reconciled_outcome], ["continue_fresh", "execution_reconciled", "not_performed"]);
  });

  it("made exactly one decision per run and attempt (two for the resolved run), duplicates included", async () => {
    await waitFor(() => observer.classifierIdle(), "the classifier to finish");
    const counts = runsPlayed.map((runId) => inbox.of(runId).length);
    const dead = runsPlayed.filter((r) => inbox.of(r).length === 0);
    assert.equal(dead.length, 3, "the three dead-lettered runs got none");
    assert.equal(counts.filter((n) => n === 2).length, 1, "the resolved run got reconcile and continue_fresh");
    assert.equal(counts.filter((n) => n > 2).length, 0);
    assert.equal(counts.filter((n) => n === 1).length, runsPlayed.length - 4);
  });
});
