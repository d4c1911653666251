/**
 * examples/codex_runner.ts against the four running services with the real, pinned Codex CLI
 * (tests/harnesses, installed by `make harnesses`), offline: the saved thread does not exist on
 * this host, codex fails to resume it, the Codex adapter classifies that as
 * `native_session_missing`, and the runner continues in a fresh thread — once through the
 * classifier's decision (the failure reported, row 4.4.10), once through the presence probe (the
 * handle rejected, nothing reported).
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { connect, subjects, type Runner } from "../src/index.js";
import { Observer } from "./support/inbox.js";
import { newSession, randomKey, ROOT, Stack, uniqueId } from "./support/stack.js";

const KEY = randomKey();
const CODEX = join(ROOT, "tests", "harnesses", "node_modules", ".bin", "codex");
const EXAMPLE = join(ROOT, "sdk", "typescript", "dist", "examples", "codex_runner.js");
const stack = new Stack();
const scratch = mkdtempSync(join(tmpdir(), "codex-runner-"));
let observer: Observer;
const runners: Runner[] = [];

before(async () => {
  assert.ok(
    existsSync(CODEX),
    `${CODEX} is missing: \`make harnesses\` installs the pinned harness CLIs (\`make test\` and \`make sdk-ts\` run it)`,
  );
  await stack.start({ runnerKeys: { k1: KEY } });
  observer = await Observer.open(stack.natsUrl);
});

after(async () => {
  await Promise.all(runners.map((r) => r.close().catch(() => undefined)));
  await observer?.close();
  await stack.stop();
  rmSync(scratch, { recursive: true, force: true });
});

/** A home of codex's own, offline: its model provider is a closed local port, so a fresh thread
 * starts (and is written) but its turn never completes. */
function codexHome(): { home: string; codexHome: string; work: string } {
  const root = mkdtempSync(join(scratch, "run-"));
  const home = join(root, "home");
  const codexHome = join(home, ".codex");
  const work = join(root, "work");
  mkdirSync(codexHome, { recursive: true });
  mkdirSync(work);
  writeFileSync(
    join(codexHome, "config.toml"),
    'model_provider = "offline"\n[model_providers.offline]\nname = "offline"\n' +
      'base_url = "http://127.0.0.1:9/v1"\nwire_api = "responses"\nrequest_max_retries = 0\nstream_max_retries = 0\n',
  );
  return { home, codexHome, work };
}

function rollouts(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((p) => p.endsWith(".jsonl"));
}

async function runExample(remoteSessions: boolean) {
  const runnerId = uniqueId("codex-example");
  const session = newSession("codex-example");
  const saved = randomUUID(); // a thread id codex never had on this host
  const r = await connect({ servers: stack.natsUrl, runnerId, signingKeys: { k1: KEY }, requestTimeout: 5 });
  runners.push(r);
  const { home, codexHome: codexDir, work } = codexHome();
  await r.commit({
    session, nativeSessionId: saved, adapter: "codex", model: "gpt-5-codex", cwd: work, cursor: "turn-1",
    checkpointPolicy: "same_session_only",
  });
  const args = [
    EXAMPLE, "--tenant", session.tenant, "--conversation", session.conversation_id, "--agent", session.agent_id,
    "--codex", CODEX, "--cwd", work, "--turn-timeout", "4", ...(remoteSessions ? ["--remote-sessions"] : []), "hi",
  ];
  const out = spawnSync(process.execPath, args, {
    env: {
      PATH: `${dirname(process.execPath)}:/usr/bin:/bin`,
      HOME: home,
      CODEX_HOME: codexDir,
      NATS_URL: stack.natsUrl,
      RUNNER_ID: runnerId,
      CONTINUITY_RUNNER_KEYS: `k1=${Buffer.from(KEY).toString("base64")}`,
    },
    encoding: "utf8",
    timeout: 90_000,
  });
  const events = await observer.stored("CONTINUITY_EVENTS", subjects.event(runnerId, "resume_failed"));
  return { out, saved, events, codexDir, lines: out.stdout.trim().split("\n") };
}

describe("the Codex runner example with the real codex CLI", () => {
  it("reports the missing thread, follows continue_fresh (4.4.10) and starts a fresh thread", async () => {
    const { out, saved, events, codexDir, lines } = await runExample(true);
    const text = out.stdout + out.stderr;
    assert.equal(out.status, 2, text); // the fresh turn cannot complete offline
    assert.equal(lines[0], `decide: resume ${saved}, incremental turn`, text);
    assert.match(lines[1] ?? "", /^recover: native_session_missing \(codex\.missing\.[a-z-]+\); reported \S+$/, text);
    assert.equal(lines[2], "decision: continue_fresh (native_session_missing, rule 4.4.10)", text);
    assert.equal(lines[3], "decide: fresh (resume_target_rejected), full transcript", text);
    const fresh = /^codex: fresh thread ([0-9a-f-]{36}), exit code/.exec(lines[4] ?? "");
    assert.ok(fresh, text);
    assert.notEqual(fresh[1], saved);
    assert.equal(lines[5], "codex: the fresh turn did not complete within 4 s: stopped", text);
    // codex really started the fresh thread: its rollout is on disk, named by its id.
    assert.ok(rollouts(join(codexDir, "sessions")).some((p) => p.endsWith(`-${fresh[1]}.jsonl`)), text);
    assert.equal(events, 1);
  });

  it("rejects the missing thread after the probe finds no rollout, reports nothing, starts fresh", async () => {
    const { out, saved, events, lines } = await runExample(false);
    const text = out.stdout + out.stderr;
    assert.equal(out.status, 2, text);
    assert.equal(lines[0], `decide: resume ${saved}, incremental turn`, text);
    assert.match(lines[1] ?? "", /^recover: native_session_missing \(codex\.missing\.[a-z-]+\); not on this host: rejected$/, text);
    assert.equal(lines[2], "decide: fresh (resume_target_rejected), full transcript", text);
    assert.match(lines[3] ?? "", /^codex: fresh thread [0-9a-f-]{36}, exit code/, text);
    assert.equal(events, 0);
  });
});
