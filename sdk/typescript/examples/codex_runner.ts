/**
 * A runner around the real Codex CLI (`codex exec --json`), one turn per run.
 *
 * 1. `decide`: resume the saved thread (`codex exec --skip-git-repo-check --json resume ID PROMPT`,
 *    the incremental turn) or start a fresh one (`codex exec --skip-git-repo-check --json
 *    TRANSCRIPT`, the full transcript).
 * 2. A resume that failed goes to `runner.recover` with what codex left (exit code, stdout,
 *    stderr): the Codex adapter classifies it with the shipped harness table. When the thread's
 *    rollout file is not on this host (the presence probe), the saved handle is rejected; else the
 *    failure is reported with a command result signed with its class, and the runner follows
 *    Continuity's decision (`native_session_missing` is `continue_fresh`).
 * 3. `decide` again after a rejection or a fresh decision: `fresh` (`resume_target_rejected`).
 * 4. After a turn codex completed (`turn.completed`), `commit` its thread id; when the turn followed
 *    a decision of Continuity, tell it the decision worked (`turn_completed`, contract 4.6):
 *    `runner.recover` sends it for a resume (`decidedAttempt`), `reportTurnCompleted` for a fresh
 *    thread.
 *
 *   npm run build && NATS_URL=nats://127.0.0.1:4222 CONTINUITY_RUNNER_KEYS=k1=<base64> \
 *     node dist/examples/codex_runner.js --tenant acme --conversation conv-1 "Go on"
 *
 * Options: --codex PATH (default `codex` on PATH), --cwd DIR, --transcript TEXT, --cursor C,
 * --turn-timeout SECONDS (default 600: a turn that does not complete in time is stopped), and
 * --remote-sessions (codex keeps its threads where this process cannot look: the probe is not
 * asked, and every failure is reported for Continuity to decide). Exit code 0 when the turn ran and
 * was committed; 1 when Continuity says to stop (operator, reconcile, a refusal); 2 when codex
 * itself failed or timed out in a fresh thread.
 */

import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { connect, harness, type Decision, type Runner, type SessionRef } from "../src/index.js";

const ADAPTER = "codex";

interface Turn {
  session: SessionRef;
  cwd: string;
  model: string;
  prompt: string;
  transcript: string;
  cursor: string;
  codex: string;
  turnTimeoutS: number;
  remoteSessions: boolean;
}

interface Ran {
  outcome: harness.Outcome;
  /** The thread codex started or resumed (`thread.started`), if it said so. */
  threadId: string | null;
  completed: boolean;
  timedOut: boolean;
}

const say = (text: string) => console.log(text);

/** Runs codex in the workspace and reads its JSON lines; stops it after the turn's deadline. */
function runCodex(turn: Turn, args: string[]): Promise<Ran> {
  return new Promise((done, fail) => {
    const child = spawn(turn.codex, args, { cwd: turn.cwd, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    let timedOut = false;
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGTERM");
    }, turn.turnTimeoutS * 1000);
    child.on("error", (err) => {
      clearTimeout(timer);
      fail(err);
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      let threadId: string | null = null;
      let completed = false;
      for (const line of stdout.split("\n")) {
        let event: { type?: unknown; thread_id?: unknown };
        try {
          event = JSON.parse(line) as typeof event;
        } catch {
          continue;
        }
        if (event.type === "thread.started" && typeof event.thread_id === "string") threadId = event.thread_id;
        if (event.type === "turn.completed") completed = true;
      }
      done({ outcome: { exit_code: code, stdout, stderr }, threadId, completed, timedOut });
    });
  });
}

async function waitUntil(notBefore: string | null): Promise<void> {
  if (notBefore) await new Promise((r) => setTimeout(r, Math.max(0, Date.parse(notBefore) - Date.now())));
}

/** The decision of `runId` (null when its report was refused for good); a report refused for the
 * runner's quota is sent again at `not_before`. */
async function decisionFor(runner: Runner, runId: string): Promise<Decision | null> {
  for await (const delivery of runner.decisions()) {
    const { refusal, decision } = delivery;
    delivery.ack();
    if (refusal !== null && refusal.run_id === runId) {
      if (refusal.code !== "quota_exceeded") {
        say(`refused: ${refusal.code}`);
        return null;
      }
      say(`reported again ${await runner.reportAgain(refusal)}`);
    } else if (decision !== null && decision.run_id === runId) {
      return decision;
    }
  }
  return null;
}

async function oneTurn(runner: Runner, turn: Turn): Promise<number> {
  const adapter = harness.adapter(ADAPTER);
  const runId = `run-${randomUUID()}`;
  let attempt = 1;
  let epoch: number | null = null; // the epoch a decision set, to commit with
  let goFresh = false; // a decision said: continue in a fresh thread
  let decided: number | null = null; // the attempt of the last decision: a completed turn is its outcome
  let reported: string | null = null; // the turn_completed sent for it
  const base = { session: turn.session, adapter: ADAPTER, model: turn.model, cwd: turn.cwd };
  for (;;) {
    const reply = await runner.decide({ ...base, latestCursor: turn.cursor, compatibility: "none", readyGeneration: null });
    const handle = reply.resume_session_id;
    let threadId: string;
    if (reply.mode === "resume" && handle !== null && !goFresh) {
      say(`decide: resume ${handle}, incremental turn`);
      const ran = await runCodex(turn, ["exec", "--skip-git-repo-check", "--json", "resume", handle, turn.prompt]);
      const verdict = await runner.recover(adapter, ran.outcome, {
        runId,
        attempt,
        session: turn.session,
        nativeSessionId: handle,
        cwd: turn.cwd,
        // The probe looks for the thread's rollout under CODEX_HOME (or ~/.codex); it cannot see
        // another container's, so a remote runner reports instead.
        env: process.env,
        probeFirst: !turn.remoteSessions,
        decidedAttempt: decided, // after a retry: its success is the decision's outcome
      });
      if (verdict.kind === "not_a_failure") {
        threadId = handle;
        reported = verdict.reported_event_id;
      } else if (verdict.kind === "rejected") {
        say(`recover: ${verdict.failure_class} (${verdict.rule}); not on this host: rejected`);
        continue; // decide again: fresh, resume_target_rejected
      } else {
        say(`recover: ${verdict.failure_class} (${verdict.rule}); reported ${verdict.event_id}`);
        const decision = await decisionFor(runner, runId);
        if (decision === null) return 1;
        say(`decision: ${decision.action} (${decision.reason}, rule ${decision.rule})`);
        decided = decision.attempt;
        if (decision.action === "retry_same_session") {
          await waitUntil(decision.not_before);
          attempt += 1;
          continue;
        }
        if (decision.action !== "continue_fresh" && decision.action !== "open_replacement") {
          say("stopped: the saved session is held for an operator");
          return 1;
        }
        epoch = decision.epoch;
        goFresh = true;
        continue; // decide again, then a fresh thread with the full transcript
      }
    } else {
      say(`decide: fresh (${reply.reason}), full transcript`);
      const ran = await runCodex(turn, ["exec", "--skip-git-repo-check", "--json", turn.transcript]);
      say(`codex: fresh thread ${ran.threadId ?? "(none)"}, exit code ${ran.outcome.exit_code}`);
      if (ran.timedOut) {
        say(`codex: the fresh turn did not complete within ${turn.turnTimeoutS} s: stopped`);
        return 2;
      }
      const assessed = adapter.assess(ran.outcome);
      if (assessed.failure_class !== null || ran.threadId === null || !ran.completed) {
        say(`codex: the fresh turn failed (${assessed.rule})`);
        return 2;
      }
      threadId = ran.threadId;
    }
    const saved = await runner.commit({
      ...base,
      nativeSessionId: threadId,
      cursor: turn.cursor,
      checkpointPolicy: "same_session_only",
      expectedRevision: reply.revision,
      epoch: epoch ?? reply.epoch,
    });
    say(`commit: ${threadId} at revision ${saved.revision}, epoch ${saved.epoch}`);
    if (decided !== null && reported === null) {
      // the fresh thread after a decision
      reported = await runner.reportTurnCompleted({
        runId, attempt: decided, session: turn.session, nativeSessionId: threadId, harness: { name: ADAPTER },
      });
    }
    if (reported !== null) say(`outcome: turn completed after the decision of attempt ${decided} (${reported})`);
    return 0;
  }
}

/** `CONTINUITY_RUNNER_KEYS` (`id=base64,...`): the keys the command results are signed with. */
function signingKeys(value: string): Record<string, Uint8Array> {
  const keys: Record<string, Uint8Array> = {};
  for (const item of value.split(",").filter(Boolean)) {
    const at = item.indexOf("=");
    keys[item.slice(0, at)] = Buffer.from(item.slice(at + 1), "base64");
  }
  return keys;
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    tenant: { type: "string" },
    conversation: { type: "string" },
    agent: { type: "string", default: "codex" },
    transcript: { type: "string" },
    cursor: { type: "string", default: "turn-1" },
    model: { type: "string", default: "gpt-5-codex" },
    cwd: { type: "string", default: process.cwd() },
    codex: { type: "string", default: "codex" },
    "turn-timeout": { type: "string", default: "600" },
    "remote-sessions": { type: "boolean", default: false },
  },
});
const prompt = positionals[0];
if (prompt === undefined || values.tenant === undefined || values.conversation === undefined) {
  console.error("usage: codex_runner --tenant T --conversation C [options] PROMPT");
  process.exit(64);
}
const turn: Turn = {
  session: { tenant: values.tenant, conversation_id: values.conversation, agent_id: values.agent },
  cwd: resolve(values.cwd),
  model: values.model,
  prompt,
  transcript: values.transcript ?? prompt,
  cursor: values.cursor,
  codex: values.codex,
  turnTimeoutS: Number(values["turn-timeout"]),
  remoteSessions: values["remote-sessions"],
};
const runner = await connect({
  servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
  runnerId: process.env.RUNNER_ID ?? "codex-runner",
  signingKeys: signingKeys(process.env.CONTINUITY_RUNNER_KEYS ?? ""),
});
try {
  process.exitCode = await oneTurn(runner, turn);
} finally {
  await runner.close();
}
