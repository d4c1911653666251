/**
 * The TS SDK in NATS's decentralized layout (docs/operations/nats-authorization.md, "Runners on
 * a running cluster"): the operator folder of `continuity nats init`, a server including its
 * operator.conf, the four services connecting with their creds files, and a runner issued on the
 * running server by `continuity runners add --operator-dir --create-consumer`. The runner signs in
 * with its creds file (`credsFile`) and does its part without the server refusing anything; once
 * `continuity runners remove --operator-dir` revoked it, its creds no longer connect. Options that
 * name more than one key, or a creds file that cannot be used, are refused before any connection.
 */

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, describe, it } from "node:test";
import {
  connect,
  InvalidRequest,
  Unavailable,
  type ArchiveRequest,
  type ConnectOptions,
  type Runner,
} from "../src/index.js";
import { Inbox } from "./support/inbox.js";
import { newSession, Stack, uniqueId } from "./support/stack.js";

describe("credentials refused before any connection", () => {
  const dir = mkdtempSync(join(tmpdir(), "continuity-sdkts-creds-"));
  const seed = "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY";

  after(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  async function refusal(options: Partial<ConnectOptions>): Promise<InvalidRequest> {
    let caught: unknown = null;
    try {
      const r = await connect({ servers: "nats://127.0.0.1:1", runnerId: "sdkts-creds", ...options });
      await r.close();
    } catch (err) {
      caught = err;
    }
    assert.ok(caught instanceof InvalidRequest, `expected InvalidRequest, got ${String(caught)}`);
    assert.equal(caught.code, "invalid_field");
    assert.ok(!caught.message.includes(seed), "the seed is repeated in the refusal");
    return caught;
  }

  it("refuses more than one of nkeySeed, nkeySeedFile and credsFile, naming the last", async () => {
    const seedFile = join(dir, "runner.nk");
    writeFileSync(seedFile, seed);
    const creds = join(dir, "runner.creds");
    writeFileSync(creds, "not read: refused before");
    const cases: [Partial<ConnectOptions>, string][] = [
      [{ nkeySeed: seed, nkeySeedFile: seedFile }, "nkeySeedFile"],
      [{ nkeySeed: seed, credsFile: creds }, "credsFile"],
      [{ nkeySeedFile: seedFile, credsFile: creds }, "credsFile"],
      [{ nkeySeed: seed, nkeySeedFile: seedFile, credsFile: creds }, "credsFile"],
    ];
    for (const [options, field] of cases) {
      const err = await refusal(options);
      assert.equal(err.field, field, JSON.stringify(Object.keys(options)));
      assert.match(err.message, /give only one of nkeySeed, nkeySeedFile, credsFile/);
    }
  });

  it("refuses a creds file it cannot read, or one without a user JWT and its seed", async () => {
    const missing = await refusal({ credsFile: join(dir, "missing.creds") });
    assert.deepEqual([missing.field, missing.message], ["credsFile", "credsFile: cannot be read"]);
    const seedOnly = join(dir, "seed-only.creds");
    writeFileSync(seedOnly, `-----BEGIN USER NKEY SEED-----\n${seed}\n------END USER NKEY SEED------\n`);
    const wrong = await refusal({ credsFile: seedOnly });
    assert.equal(wrong.field, "credsFile");
    assert.match(wrong.message, /not a NATS creds file/);
  });
});

describe("the runner SDK with a creds file, in the decentralized layout", () => {
  const stack = new Stack();
  const runners: Runner[] = [];

  async function runner(runnerId: string, credsFile: string): Promise<{ r: Runner; errors: string[] }> {
    const r = await connect({
      servers: stack.natsUrl, runnerId, credsFile, createConsumer: false, requestTimeout: 5, connectTimeout: 3,
    });
    runners.push(r);
    const errors: string[] = [];
    void (async () => {
      for await (const status of r.nc.status()) if (status.type === "error") errors.push(status.error.message);
    })();
    return { r, errors };
  }

  before(async () => {
    await stack.start({
      operator: true,
      env: { CONTINUITY_RETRY_BACKOFF_S: "1", CONTINUITY_ARCHIVE_TIMEOUT_S: "10", CONTINUITY_TENANCY: "enforced" },
    });
  });

  afterEach(async () => {
    await Promise.all(runners.splice(0).map((r) => r.close().catch(() => undefined)));
  });

  after(async () => {
    await stack.stop();
  });

  it("issued on the running server, signs in with its creds file and does its part", async () => {
    const creds = stack.issueRunner("runner-c");
    const { r, errors } = await runner("runner-c", creds);
    const moves: ArchiveRequest[] = [];
    r.serveArchive((request) => {
      moves.push(request);
      return { exit_code: 0, timed_out: false, output: "moved" };
    });
    await r.nc.flush();
    const inbox = new Inbox(r);
    const session = newSession("creds");
    const committed = await r.commit({
      session, nativeSessionId: "ns-1", adapter: "codex", model: "m", cwd: "/w", cursor: "c1",
      checkpointPolicy: "allow_replacement_after_resume_failure",
    });
    const ready = await r.decide({
      session, adapter: "codex", model: "m", cwd: "/w", latestCursor: "c1", compatibility: "none",
      readyGeneration: null,
    });
    assert.deepEqual([ready.mode, ready.resume_session_id], ["resume", "ns-1"]);
    const runId = uniqueId("run");
    await r.reportResumeFailure({
      runId, attempt: 1, session, nativeSessionId: "ns-1", error: { type: "transport", code: "stream_closed" },
    });
    const d = await inbox.next(runId);
    assert.deepEqual([d.action, d.runner_id, d.epoch], ["open_replacement", "runner-c", committed.epoch + 1]);
    // The archiver's move reached this runner through the ARCHIVE account's import.
    assert.deepEqual(moves.map((m) => m.run_id), [runId]);
    assert.equal((await r.get(session)).state, "archived");
    assert.deepEqual(errors, []);
  });

  it("revoked by `continuity runners remove --operator-dir`, its creds no longer connect", async () => {
    const creds = stack.issueRunner("runner-r");
    const { r } = await runner("runner-r", creds);
    await r.decide({
      session: newSession("revoked"), adapter: "codex", model: "m", cwd: "/w", latestCursor: "c1",
      compatibility: "none", readyGeneration: null,
    });
    await r.close();
    stack.removeRunner("runner-r");
    let caught: unknown = null;
    try {
      await runner("runner-r", creds);
    } catch (err) {
      caught = err;
    }
    assert.ok(caught instanceof Unavailable, `expected Unavailable, got ${String(caught)}`);
    assert.equal(caught.code, "unavailable");
    assert.match(caught.message, /AuthorizationError/); // refused by the server, not unreachable
  });
});
