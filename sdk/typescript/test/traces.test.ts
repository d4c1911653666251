/**
 * One run's trace, from the runner's report to the decision it receives: the `drop` scenario of
 * sdk/scenarios.json (policy `allow_replacement_after_resume_failure`, attempt 1: the classifier
 * decides to archive, the archiver asks the runner to move the session aside, then
 * `open_replacement`) played through the TS SDK with its own `traceparent`, against the four
 * services exporting their spans over OTLP/HTTP to the project's receiver (`python -m
 * continuity.devstack.otlp`, started first). Its spans, read back from the receiver's JSON lines:
 * the run's spans are all in the report's trace, connected to the report's span, the classifier's,
 * the outbox's and the archiver's among them; the decision and the archive request the runner
 * receives carry that trace; and no span holds the session's compatibility generation, the
 * event's error message or the archive handler's output. The checks are also run on planted
 * spans, to see each one fail.
 */

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  connect,
  isTraceparent,
  newTraceparent,
  traceIdOf,
  type ArchiveRequest,
  type CheckpointPolicy,
  type Decision,
  type ErrorInfo,
  type Runner,
} from "../src/index.js";
import { OtlpReceiver, type ReceivedSpan } from "./support/otlp.js";
import { newSession, ROOT, Stack, uniqueId, waitFor } from "./support/stack.js";

interface Row {
  policy: CheckpointPolicy;
  attempt: number;
  governed_wait_elapsed: boolean;
  action: string;
  archive_first: boolean;
  reason: string;
  rule: string;
}

interface Scenario {
  name: string;
  failure_class: string | null;
  event: { error?: ErrorInfo };
  expect: Row[];
}

const DOC = JSON.parse(readFileSync(join(ROOT, "sdk", "scenarios.json"), "utf8")) as { scenarios: Scenario[] };
const SCENARIO = DOC.scenarios.find((s) => s.name === "drop")!;
const POLICY: CheckpointPolicy = "allow_replacement_after_resume_failure";
const ROW = SCENARIO?.expect.find((r) => r.policy === POLICY && r.attempt === 1 && !r.governed_wait_elapsed);

const RUNNER_ID = "sdkts-traces";
const MARK = randomBytes(6).toString("hex");
/** Values no span may hold: the session's compatibility generation, the runner's free text. */
const GENERATION = `gen-trace-${MARK}`;
const ERROR_MESSAGE = `${SCENARIO?.event.error?.message ?? "closed"}: peer note ${MARK}-errortext`;
const ARCHIVE_OUTPUT = `moved aside to /archive/${MARK}-archiveout`;
const FORBIDDEN = [GENERATION, ERROR_MESSAGE, `${MARK}-errortext`, ARCHIVE_OUTPUT, `${MARK}-archiveout`];

/** The services' span names this story goes through. */
const CLASSIFIER_CONSUMER = "continuity-classifier classifier";
const ARCHIVER_CONSUMER = "continuity-archiver archiver";
const RUNNER_ARCHIVE = "continuity-archiver runner archive";
const DECISIONS_SUBJECT = `continuity.decisions.${RUNNER_ID}`;
const WORK_SUBJECT = "continuity.work.archive";

const receiver = new OtlpReceiver();
const stack = new Stack();
let runner: Runner;
const received: { decision: Decision; traceparent: string | undefined }[] = [];
const moves: { request: ArchiveRequest; traceparent: string | undefined }[] = [];

before(async () => {
  await receiver.start();
  await stack.start({
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
      OTEL_BSP_SCHEDULE_DELAY: "50",
      CONTINUITY_ARCHIVE_TIMEOUT_S: "10",
    },
  });
  runner = await connect({ servers: stack.natsUrl, runnerId: RUNNER_ID });
  runner.serveArchive((request, { traceparent }) => {
    moves.push({ request, traceparent });
    return { exit_code: 0, timed_out: false, output: ARCHIVE_OUTPUT };
  });
  await runner.nc.flush();
  void runner.handleDecisions((decision, { traceparent }) => {
    received.push({ decision, traceparent });
  });
});

after(async () => {
  await runner?.close().catch(() => undefined);
  await stack.stop();
  await receiver.stop();
});

// ---- the checks, each returning what it found wrong ------------------------------------------

/** The spans of `runId` (attribute `continuity.run_id`) outside trace `traceId`. */
function outsideTrace(spans: ReceivedSpan[], runId: string, traceId: string): string[] {
  return spans
    .filter((s) => s.attributes["continuity.run_id"] === runId && s.trace_id !== traceId)
    .map((s) => `${s.service}: ${s.name} in trace ${s.trace_id}`);
}

/** The spans of trace `traceId` whose parent is neither the report's span nor a received span
 * of that trace (a root of its own included). */
function loose(spans: ReceivedSpan[], traceId: string, reportSpanId: string): string[] {
  const trace = spans.filter((s) => s.trace_id === traceId);
  const ids = new Set(trace.map((s) => s.span_id));
  return trace
    .filter((s) => s.parent_span_id !== reportSpanId && !ids.has(s.parent_span_id))
    .map((s) => `${s.service}: ${s.name} (parent "${s.parent_span_id}")`);
}

/** What trace `traceId` lacks of the story: the classifier's consumer span, its outbox's
 * publication of the archive work, the archiver's consumer span, its `runner archive` span, and
 * an outbox's publication of the decision. */
function missing(spans: ReceivedSpan[], traceId: string): string[] {
  const trace = spans.filter((s) => s.trace_id === traceId);
  const lacking = [CLASSIFIER_CONSUMER, ARCHIVER_CONSUMER, RUNNER_ARCHIVE].filter((n) => !trace.some((s) => s.name === n));
  if (publication(trace, WORK_SUBJECT, "continuity-classifier") === undefined) lacking.push(`outbox publish to ${WORK_SUBJECT}`);
  if (publication(trace, DECISIONS_SUBJECT) === undefined) lacking.push(`outbox publish to ${DECISIONS_SUBJECT}`);
  return lacking;
}

/** An outbox's span publishing on `subject` (by `service` when given). */
function publication(trace: ReceivedSpan[], subject: string, service?: string): ReceivedSpan | undefined {
  return trace.find(
    (s) =>
      s.name.endsWith(" outbox publish") &&
      s.attributes["messaging.destination.name"] === subject &&
      (service === undefined || s.service === service),
  );
}

/** Where a span (its name, status message, event names, attribute values) holds one of `values`. */
function forbiddenIn(spans: ReceivedSpan[], values: string[]): string[] {
  const found: string[] = [];
  for (const s of spans) {
    const texts = [s.name, s.status_message, ...s.events, ...Object.values(s.attributes).map((v) => JSON.stringify(v))];
    for (const value of values) if (texts.some((t) => t.includes(value))) found.push(`${s.service} ${s.name}: ${value}`);
  }
  return found;
}

/** The span id of a traceparent. */
function spanIdOf(traceparent: string): string {
  return traceparent.slice(36, 52);
}

describe("a run's trace through the TS SDK and the four services", () => {
  it(`${SCENARIO?.name}, ${POLICY}, attempt 1: one connected trace from the report to the decision, the archive inside it`, async () => {
    assert.ok(SCENARIO && SCENARIO.event.error, "the drop scenario sends a typed error");
    assert.ok(ROW, "its row for the policy at attempt 1");
    assert.deepEqual([ROW.action, ROW.archive_first], ["open_replacement", true], "archive, then open_replacement");

    const session = newSession("traces");
    const saved = await runner.commit({
      session, nativeSessionId: "thread-1", adapter: "codex", model: "gpt-5-codex", cwd: "/workspace/app",
      cursor: "c-1", checkpointPolicy: POLICY, compatibilityGeneration: GENERATION,
    });
    const runId = uniqueId("run-traces");
    const traceparent = newTraceparent();
    const traceId = traceIdOf(traceparent);
    const reportSpanId = spanIdOf(traceparent);
    await runner.reportResumeFailure({
      runId, attempt: 1, session, nativeSessionId: "thread-1", governedWaitElapsed: false,
      error: { ...SCENARIO.event.error, message: ERROR_MESSAGE }, traceparent,
    });
    assert.equal(runner.lastTraceparent, traceparent);

    // The decision, as the scenario's row says, after the archive move.
    const got = await waitFor(() => received.find((r) => r.decision.run_id === runId), `the decision of ${runId}`, 60_000);
    const d = got.decision;
    assert.deepEqual(
      { action: d.action, reason: d.reason, rule: d.rule, attempt: d.attempt, failure_class: d.failure_class },
      { action: ROW.action, reason: ROW.reason, rule: ROW.rule, attempt: 1, failure_class: SCENARIO.failure_class },
    );
    assert.equal(d.epoch, saved.epoch + 1, "the replacement's epoch");
    const move = moves.find((m) => m.request.run_id === runId);
    assert.ok(move, "the archive handler was asked to move the session aside");
    assert.equal(move.request.native_session_id, "thread-1");

    // 4. The decision and the archive request came in the report's trace.
    assert.ok(isTraceparent(got.traceparent), `the decision's traceparent: ${String(got.traceparent)}`);
    assert.equal(traceIdOf(got.traceparent), traceId, "the decision carries the report's trace");
    assert.ok(isTraceparent(move.traceparent), `the archive request's traceparent: ${String(move.traceparent)}`);
    assert.equal(traceIdOf(move.traceparent), traceId, "the archive request carries the report's trace");
    const decisionSpan = spanIdOf(got.traceparent);
    const archiveSpan = spanIdOf(move.traceparent);

    // Read until the story's spans are in, with the spans the two traceparents name: each
    // service's consumer span ends last of its spans for the work, and a service exports its
    // spans in the order they end.
    const spans = await waitFor(() => {
      const all = receiver.spans();
      const ids = new Set(all.filter((s) => s.trace_id === traceId).map((s) => s.span_id));
      return missing(all, traceId).length === 0 && ids.has(decisionSpan) && ids.has(archiveSpan) ? all : undefined;
    }, `the spans of trace ${traceId}: ${CLASSIFIER_CONSUMER}, ${ARCHIVER_CONSUMER}, ${RUNNER_ARCHIVE}, the decision's publication`, 60_000);
    const trace = spans.filter((s) => s.trace_id === traceId);
    const shown = trace.map((s) => `${s.service}: ${s.name} ${s.span_id} <- ${s.parent_span_id}`).join("\n");

    // 1. Every span of the run is in the report's trace (and there are some).
    const ofRun = spans.filter((s) => s.attributes["continuity.run_id"] === runId);
    assert.ok(ofRun.length >= 3, `the run's spans carry its id:\n${shown}`);
    assert.deepEqual(outsideTrace(spans, runId, traceId), [], "the run's spans outside the report's trace");

    // 2. Connected: each span hangs from the report's span or from another span of the trace.
    assert.deepEqual(loose(spans, traceId, reportSpanId), [], `spans not connected to the report:\n${shown}`);
    const classifier = trace.find((s) => s.name === CLASSIFIER_CONSUMER)!;
    assert.equal(classifier.parent_span_id, reportSpanId, "the classifier's consumer span is a child of the report's span");
    assert.equal(classifier.attributes["continuity.run_id"], runId);

    // 3. The classifier, the outbox (the archive work's publication and the decision's) and the
    // archiver are in it.
    assert.deepEqual(missing(spans, traceId), []);
    const archive = trace.find((s) => s.name === RUNNER_ARCHIVE)!;
    assert.equal(archive.attributes["continuity.run_id"], runId);
    // 4, closer: the archive request is the archiver's `runner archive` span; the decision was
    // published by the outbox's span.
    assert.equal(archiveSpan, archive.span_id, "the archive request's traceparent names the archiver's span");
    assert.equal(decisionSpan, publication(trace, DECISIONS_SUBJECT)!.span_id, "the decision's traceparent names its publication");

    // 5. No span holds the generation, the error message or the archive output.
    assert.deepEqual(forbiddenIn(spans, FORBIDDEN), []);
  });

  it("each check finds a planted fault", () => {
    const T = "a".repeat(32);
    const OTHER = "b".repeat(32);
    const REPORT = "1".repeat(16);
    const span = (trace: string, id: string, parent: string, name: string, attributes: Record<string, unknown> = {}) =>
      ({ trace_id: trace, span_id: id, parent_span_id: parent, name, service: "svc", kind: 1, attributes,
        links: [], status: 0, status_message: "", events: [] }) satisfies ReceivedSpan;
    const good = [
      span(T, "2".repeat(16), REPORT, CLASSIFIER_CONSUMER, { "continuity.run_id": "run-1" }),
      { ...span(T, "3".repeat(16), "2".repeat(16), "continuity-classifier outbox publish", { "messaging.destination.name": WORK_SUBJECT }), service: "continuity-classifier" },
      span(T, "4".repeat(16), "3".repeat(16), ARCHIVER_CONSUMER, { "continuity.run_id": "run-1" }),
      span(T, "5".repeat(16), "4".repeat(16), RUNNER_ARCHIVE, { "continuity.run_id": "run-1" }),
      span(T, "6".repeat(16), "4".repeat(16), "continuity-archiver outbox publish", { "messaging.destination.name": DECISIONS_SUBJECT }),
    ];
    assert.deepEqual(
      [outsideTrace(good, "run-1", T), loose(good, T, REPORT), missing(good, T), forbiddenIn(good, FORBIDDEN)],
      [[], [], [], []],
    );
    // 1: a span of the run in another trace.
    assert.deepEqual(outsideTrace([...good, span(OTHER, "7".repeat(16), "", "x", { "continuity.run_id": "run-1" })], "run-1", T), [
      `svc: x in trace ${OTHER}`,
    ]);
    // 2: a span whose parent was not received, and a root of its own.
    assert.deepEqual(loose([...good, span(T, "8".repeat(16), "9".repeat(16), "y"), span(T, "a".repeat(16), "", "z")], T, REPORT), [
      `svc: y (parent "${"9".repeat(16)}")`,
      `svc: z (parent "")`,
    ]);
    assert.deepEqual(loose(good, T, "f".repeat(16)).length, 1, "checked against another report span");
    // 3: no archiver, no publication of the decision; no classifier; the work published by another service.
    assert.deepEqual(missing(good.slice(0, 2), T), [ARCHIVER_CONSUMER, RUNNER_ARCHIVE, `outbox publish to ${DECISIONS_SUBJECT}`]);
    assert.deepEqual(missing(good.slice(1), T), [CLASSIFIER_CONSUMER]);
    assert.deepEqual(missing([good[0]!, { ...good[1]!, service: "svc" }, ...good.slice(2)], T), [`outbox publish to ${WORK_SUBJECT}`]);
    // 5: each forbidden value in an attribute, a status message, an event.
    const leaky = [
      span(T, "b".repeat(16), REPORT, "g", { "continuity.detail": `generation ${GENERATION}` }),
      { ...span(T, "c".repeat(16), REPORT, "e"), status_message: `failed: ${ERROR_MESSAGE}` },
      { ...span(T, "d".repeat(16), REPORT, "o"), events: [`output ${MARK}-archiveout`] },
    ];
    assert.deepEqual(forbiddenIn(leaky, FORBIDDEN), [
      `svc g: ${GENERATION}`,
      `svc e: ${ERROR_MESSAGE}`,
      `svc e: ${MARK}-errortext`,
      `svc o: ${MARK}-archiveout`,
    ]);
  });
});
