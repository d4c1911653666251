/**
 * The runner's journey with the SDK, end to end: commit a session, ask `decide` at ready, report a
 * resume failure and follow the decision (or send the report again if its quota refused it). Needs
 * the four services (`make up` at the project root) and NATS_URL pointing at their NATS:
 *
 *   npm run build && NATS_URL=nats://127.0.0.1:4222 node dist/examples/journey.js
 */

import { randomUUID } from "node:crypto";
import { connect, SessionHeld, type Decision } from "../src/index.js";

const runner = await connect({
  servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
  runnerId: process.env.RUNNER_ID ?? "example-runner",
  requestTimeout: 5,
});

const session = { tenant: "acme", conversation_id: `conv-${randomUUID()}`, agent_id: "coder" };
const turn = { adapter: "codex", model: "gpt-5-codex", cwd: "/workspace/app" };

// After a turn: save the provider's handle and cursor.
const saved = await runner.commit({
  session, ...turn, nativeSessionId: "thread-1", cursor: "c-1", checkpointPolicy: "same_session_only",
});
console.log(`committed revision ${saved.revision}`);

// At the next ready frame: resume incrementally, or start fresh with the full transcript.
const reply = await runner.decide({
  session, ...turn, latestCursor: "c-1", compatibility: "none", readyGeneration: null,
});
console.log(`decide: ${reply.mode} ${reply.transcript}${reply.reason ? ` (${reply.reason})` : ""}`);

// The resume failed (a transport drop): Continuity decides what happens next.
const runId = `run-${randomUUID()}`;
await runner.reportResumeFailure({
  runId, attempt: 1, session, nativeSessionId: "thread-1",
  error: { type: "transport", code: "stream_closed", message: "websocket closed by peer" },
});

const decision = await new Promise<Decision>((resolve, reject) => {
  void runner.handleDecisions(
    (d) => {
      if (d.run_id === runId) resolve(d);
    },
    {
      // Refused before any decision (contract 10.5): a spent quota is sent again at not_before.
      onRefusal: async (refusal) => {
        if (refusal.run_id !== runId) return;
        if (refusal.code !== "quota_exceeded") reject(new Error(`refused: ${refusal.code}`));
        else console.log(`reported again ${await runner.reportAgain(refusal)}`);
      },
    },
  );
});
console.log(`decision: ${decision.action} ${decision.reason}`);
if (decision.action === "retry_same_session") {
  // Wait until not_before, then resume the same session with attempt 2.
  console.log(`retry after ${decision.not_before}`);
}

try {
  await runner.commit({ session, ...turn, nativeSessionId: "thread-1", cursor: "c-2", checkpointPolicy: "same_session_only" });
} catch (err) {
  if (!(err instanceof SessionHeld)) throw err;
}
await runner.close();
