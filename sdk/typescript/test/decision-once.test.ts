/**
 * A decision the runner acknowledged is handed to it once (contract 4.5): the same decision stored
 * again in CONTINUITY_DECISIONS under another message id (a publication after the stream's
 * duplicate window) is acknowledged and skipped, while a decision given back (`nak`) still comes
 * again. Against a real NATS server, the stream created as the services create it.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstream } from "@nats-io/jetstream";
import { connect, DECISIONS_STREAM, subjects, type Decision, type Runner } from "../src/index.js";
import { Observer } from "./support/inbox.js";
import { newSession, Stack, uniqueId, waitFor } from "./support/stack.js";

const stack = new Stack();
let observer: Observer;
const runners: Runner[] = [];

before(async () => {
  await stack.start({ services: false });
  observer = await Observer.open(stack.natsUrl);
  await observer.jsm.streams.add({ name: DECISIONS_STREAM, subjects: ["continuity.decisions.>"] });
});

after(async () => {
  await Promise.all(runners.map((r) => r.close().catch(() => undefined)));
  await observer?.close();
  await stack.stop();
});

function decision(runnerId: string): Decision {
  const runId = uniqueId("run");
  return {
    type: "decision",
    decision_id: `${runId}:1:retry_same_session`,
    runner_id: runnerId,
    run_id: runId,
    attempt: 1,
    session: newSession("once"),
    action: "retry_same_session",
    reason: "native_session_interrupted",
    failure_class: "unclassified",
    epoch: null,
    not_before: null,
    detail: null,
    reconciled_outcome: null,
    decided_at: new Date().toISOString(),
  } as Decision;
}

describe("decisions", () => {
  it("hand a decision the runner acknowledged over once, and one given back again", async () => {
    const runnerId = uniqueId("sdkts");
    const runner = await connect({ servers: stack.natsUrl, runnerId, nakDelay: 0.1 });
    runners.push(runner);
    const js = jetstream(observer.nc);
    const publish = (d: Decision, msgID: string) =>
      js.publish(subjects.decisions(runnerId), JSON.stringify(d), { msgID });
    const holdsNothing = async () => {
      try {
        const info = await observer.jsm.consumers.info(DECISIONS_STREAM, runnerId);
        return info.num_pending === 0 && info.num_ack_pending === 0;
      } catch {
        return false; // not created yet
      }
    };
    const [a, b, c] = [decision(runnerId), decision(runnerId), decision(runnerId)];
    const seen: string[] = [];
    const handling = runner.handleDecisions((d) => {
      seen.push(d.decision_id);
      if (d.decision_id === c.decision_id && seen.filter((id) => id === c.decision_id).length === 1) {
        throw new Error("not acted on yet"); // given back: delivered again, as before
      }
    });

    await waitFor(holdsNothing, "the runner's consumer created");
    await publish(a, a.decision_id);
    await waitFor(() => seen.length === 1, "the first decision handled");
    await waitFor(holdsNothing, "the first decision acknowledged");
    // The same decision stored again under another message id, the next one, one that fails once.
    await publish(a, `${a.decision_id}:again`);
    await publish(b, b.decision_id);
    await publish(c, c.decision_id);
    await waitFor(() => seen.length >= 4, "the next decisions handled");
    await waitFor(holdsNothing, "every message acknowledged, the copy too");
    assert.deepEqual(seen, [a.decision_id, b.decision_id, c.decision_id, c.decision_id]);
    await runner.close();
    await handling;
  });
});
