/**
 * Every case of sdk/bad-inputs.json, the file the Python SDK's tests play too, through this SDK's
 * own calls: each bad input is refused with `InvalidRequest` (its code and field, never its value)
 * before anything is sent, against a NATS server where nothing answers, so that anything sent
 * would end in `Unavailable`; each input at the limits is sent and taken by the four services (a
 * request answered without a 400, an event decided or, with a signature no service key makes,
 * quarantined, never dead-lettered as invalid); and each archive answer is the file's.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  ContinuityError,
  InvalidRequest,
  connect,
  type CommandResult,
  type CommitArgs,
  type DecideArgs,
  type RejectCode,
  type ResumeFailureArgs,
  type Runner,
  type SessionRef,
  type SignArgs,
} from "../src/index.js";
import { archiveAnswer } from "../src/checks.js";
import { Inbox, Observer, type DeadLetter } from "./support/inbox.js";
import { randomKey, ROOT, Stack, uniqueId, waitFor } from "./support/stack.js";

type Args = Record<string, unknown>;
interface Case {
  name: string;
  call: string;
  input: Args;
  code: string;
  field: string | null;
}
interface ArchiveCase {
  name: string;
  result: unknown;
  answer: unknown;
}
const DOC = JSON.parse(readFileSync(join(ROOT, "sdk", "bad-inputs.json"), "utf8")) as {
  calls: Record<string, Args>;
  bad: Case[];
  good: Case[];
  archive_answers: ArchiveCase[];
};

function isRepeat(value: unknown): value is { repeat: string; times: number } {
  return typeof value === "object" && value !== null && "repeat" in value && "times" in value;
}

function isObject(value: unknown): value is Args {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !isRepeat(value);
}

/** `value` with every `{"repeat": s, "times": n}` written out. */
function expand(value: unknown): unknown {
  if (isRepeat(value)) return value.repeat.repeat(value.times);
  if (Array.isArray(value)) return value.map(expand);
  if (isObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, expand(v)]));
  return value;
}

/** `over` merged into `base`: objects field by field, anything else replaced. */
function merged(base: unknown, over: unknown): unknown {
  if (!isObject(base) || !isObject(over)) return over;
  const out: Args = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = merged(base[k], v);
  return out;
}

/** The case's arguments, named as this SDK names them (camelCase). */
function argumentsOf(c: { call: string; input?: Args }): Args {
  const args = expand(merged(DOC.calls[c.call], c.input ?? {})) as Args;
  return Object.fromEntries(Object.entries(args).map(([k, v]) => [k.replace(/_([a-z])/g, (_, x: string) => x.toUpperCase()), v]));
}

function strings(value: unknown): string[] {
  if (typeof value === "string") return [value];
  if (typeof value === "object" && value !== null) return Object.values(value).flatMap(strings);
  return [];
}

async function play(runner: Runner, call: string, args: Args): Promise<unknown> {
  switch (call) {
    case "decide":
      return runner.decide(args as unknown as DecideArgs);
    case "commit":
      return runner.commit(args as unknown as CommitArgs);
    case "reject":
      return runner.reject(args.session as SessionRef, args.nativeSessionId as string, args.code as RejectCode);
    case "get":
      return runner.get(args.session as SessionRef);
    case "report_resume_failure":
      return runner.reportResumeFailure(args as unknown as ResumeFailureArgs);
    case "sign_command_result":
      return runner.signCommandResult(args as unknown as SignArgs);
    default:
      throw new Error(`no SDK call ${call}`);
  }
}

describe("sdk/bad-inputs.json: bad inputs are refused before anything is sent", () => {
  const bare = new Stack();
  let runner: Runner;

  before(async () => {
    await bare.start({ services: false });
    runner = await connect({ servers: bare.natsUrl, runnerId: "sdkts-inputs", signingKeys: { k1: randomKey() },
      requestTimeout: 2, publishAttempts: 1 });
  });

  after(async () => {
    await runner?.close();
    await bare.stop();
  });

  for (const c of DOC.bad) {
    it(c.name, async () => {
      const args = argumentsOf(c);
      await assert.rejects(
        async () => {
          if (c.call === "connect") {
            await (await connect({ servers: bare.natsUrl, runnerId: args.runnerId as string })).close();
          } else {
            await play(runner, c.call, args);
          }
        },
        (err) => {
          assert.ok(err instanceof InvalidRequest, `got ${String(err)}`);
          assert.equal(err.constructor, InvalidRequest);
          assert.deepEqual([err.status, err.code, err.field], [400, c.code, c.field]);
          for (const value of strings(expand(c.input))) {
            assert.ok(value.length < 4 || !err.message.includes(value), "the value is not repeated");
          }
          return true;
        },
      );
    });
  }
});

describe("sdk/bad-inputs.json: inputs at the limits are sent and taken", () => {
  const KEY = randomKey();
  const stack = new Stack();
  let observer: Observer;
  let dead: DeadLetter[];
  const runners: Runner[] = [];

  async function runnerOf(runnerId = uniqueId("sdkts-good")): Promise<Runner> {
    const r = await connect({ servers: stack.natsUrl, runnerId, signingKeys: { k1: KEY }, requestTimeout: 5 });
    runners.push(r);
    return r;
  }

  // Every case acts through one runner: another runner would find the sessions missing and its
  // events refused (contract 10.3, 10.4), and a conflict is what a case at the limits may meet.
  let good: { runner: Runner; inbox: Inbox } | null = null;
  async function goodRunner(): Promise<{ runner: Runner; inbox: Inbox }> {
    if (good === null) {
      const runner = await runnerOf();
      good = { runner, inbox: new Inbox(runner) };
    }
    return good;
  }

  before(async () => {
    await stack.start({ runnerKeys: { k1: KEY } });
    observer = await Observer.open(stack.natsUrl);
    dead = observer.deadLetters("continuity.dead.>");
    await observer.nc.flush();
  });

  after(async () => {
    await Promise.all(runners.map((r) => r.close().catch(() => undefined)));
    await observer?.close();
    await stack.stop();
  });

  for (const c of DOC.good) {
    it(c.name, async () => {
      const args = argumentsOf(c);
      if (c.call === "connect") {
        const r = await runnerOf(args.runnerId as string);
        const session = (DOC.calls.get as { session: SessionRef }).session;
        const found = await r.get(session).then(
          (view) => view.native_session_id,
          (err: unknown) => (err instanceof ContinuityError && err.code === "not_found" ? "not found" : Promise.reject(err)),
        );
        assert.ok(found); // answered on the runner's own inbox `_INBOX.<runnerId>`
        return;
      }
      const { runner: r, inbox } = await goodRunner();
      if (c.call !== "report_resume_failure" && c.call !== "sign_command_result") {
        await play(r, c.call, args).catch((err: unknown) => {
          // Refused by the stored state (a conflict), never as input.
          assert.ok(err instanceof ContinuityError && err.status === 409, `got ${String(err)}`);
        });
        return;
      }
      let expected: string;
      if (c.call === "sign_command_result") {
        const commandResult = (await play(r, c.call, args)) as CommandResult;
        const event = argumentsOf({ call: "report_resume_failure" });
        await play(r, "report_resume_failure", { ...event, runId: args.runId, attempt: args.attempt, commandResult });
        expected = "decision"; // signed with a key the services hold
      } else {
        await play(r, c.call, args);
        // A signature no service key makes is quarantined: decoded, but not trusted.
        expected = args.commandResult ? "dead:unknown_key" : "decision";
      }
      const runId = args.runId as string;
      const fate = await waitFor(() => {
        if (inbox.of(runId).some((d) => d.attempt === args.attempt)) return "decision";
        const refused = inbox.refusals.find((f) => f.run_id === runId && f.attempt === args.attempt);
        if (refused !== undefined) return `refused:${refused.code}`;
        const letter = dead.find((d) => d.text.includes(runId));
        return letter === undefined ? undefined : `dead:${letter.reason}`;
      }, `the decision or dead letter of run ${runId.slice(0, 16)}`, 20_000);
      assert.equal(fate, expected);
    });
  }
});

describe("sdk/bad-inputs.json: archive answers", () => {
  for (const c of DOC.archive_answers) {
    it(c.name, () => {
      assert.deepEqual(archiveAnswer(expand(c.result)), expand(c.answer));
    });
  }
});
