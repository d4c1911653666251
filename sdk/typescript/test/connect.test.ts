/**
 * The first connection is bounded by `connectTimeout`: a port nobody listens on and a server that
 * accepts the connection but never speaks NATS both end in `Unavailable` within it (measured
 * generously), without the URL and its credentials in the message; with several servers each gets
 * its share, so a good server after silent ones is still reached in time. Options it cannot use are
 * refused with `InvalidRequest` before any connection.
 */

import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { connect, InvalidRequest, Unavailable, type ConnectOptions, type Runner } from "../src/index.js";
import { freePort, Stack, uniqueId } from "./support/stack.js";

/** A TCP server that accepts connections and never says a word (no NATS INFO). */
async function silentServer(): Promise<{ url: string; close: () => Promise<void> }> {
  const held: Socket[] = [];
  const server: Server = createServer((socket) => {
    held.push(socket); // kept open, unanswered, until the server closes
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return {
    url: `nats://127.0.0.1:${port}`,
    close: () => {
      for (const socket of held) socket.destroy();
      return new Promise<void>((ok) => server.close(() => ok()));
    },
  };
}

/** The refusal of `connect` and how long it took, failing the test if it hangs past 30 s. */
async function refusedConnect(options: ConnectOptions): Promise<{ err: unknown; tookMs: number }> {
  const started = Date.now();
  let hang: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, fail) => {
    hang = setTimeout(() => fail(new Error("connect hung for 30 s")), 30_000);
  });
  try {
    const runner = await Promise.race([connect(options), deadline]);
    await runner.close();
    return { err: null, tookMs: Date.now() - started };
  } catch (err) {
    return { err, tookMs: Date.now() - started };
  } finally {
    clearTimeout(hang);
  }
}

describe("the first connection", () => {
  it("to a port nobody listens on is Unavailable within connectTimeout", async () => {
    const port = await freePort(); // bound, then closed: nothing listens on it
    const { err, tookMs } = await refusedConnect({
      servers: `nats://user:secret-pass@127.0.0.1:${port}`, runnerId: "sdkts-unreachable", connectTimeout: 1,
    });
    assert.ok(err instanceof Unavailable, `got ${String(err)}`);
    assert.deepEqual([err.status, err.code], [503, "unavailable"]);
    assert.ok(tookMs < 1000 + 3000, `took ${tookMs} ms`);
    assert.ok(!err.message.includes("secret-pass") && !err.message.includes("127.0.0.1"), err.message);
  });

  it("to a server that never speaks NATS is Unavailable within connectTimeout", async () => {
    const silent = await silentServer();
    try {
      const { err, tookMs } = await refusedConnect({ servers: silent.url, runnerId: "sdkts-silent", connectTimeout: 1 });
      assert.ok(err instanceof Unavailable, `got ${String(err)}`);
      assert.equal(err.code, "unavailable");
      assert.ok(tookMs >= 900 && tookMs < 1000 + 3000, `took ${tookMs} ms`);
    } finally {
      await silent.close();
    }
  });

  it("refuses options it cannot use with InvalidRequest naming the option, before connecting", async () => {
    const cases: [Partial<ConnectOptions>, string][] = [
      [{ runnerId: "runner.a" }, "runner_id"],
      [{ connectTimeout: 0 }, "connectTimeout"],
      [{ requestTimeout: -1 }, "requestTimeout"],
      [{ servers: " , " }, "servers"],
      [{ signingKeys: { "k 1": new Uint8Array(32) } }, "signingKeys"],
      [{ signingKeys: { k1: new Uint8Array(32) }, signingKeyId: "k2" }, "signingKeyId"],
    ];
    for (const [options, field] of cases) {
      await assert.rejects(connect({ servers: "nats://127.0.0.1:1", runnerId: "sdkts-options", ...options }), (err) => {
        assert.ok(err instanceof InvalidRequest, `got ${String(err)}`);
        assert.deepEqual([err.code, err.field], ["invalid_field", field]);
        return true;
      });
    }
  });

  describe("with several servers", () => {
    const stack = new Stack();
    const runners: Runner[] = [];

    before(async () => {
      await stack.start({ services: false });
    });

    after(async () => {
      await Promise.all(runners.map((r) => r.close()));
      await stack.stop();
    });

    it("reaches a good server after silent ones, in any order, within connectTimeout", async () => {
      const silent = await Promise.all([silentServer(), silentServer(), silentServer()]);
      try {
        const started = Date.now();
        const runner = await connect({
          servers: [...silent.map((s) => s.url), stack.natsUrl], runnerId: uniqueId("sdkts-many"), connectTimeout: 4,
        });
        const tookMs = Date.now() - started;
        runners.push(runner);
        assert.equal(runner.nc.getServer(), `127.0.0.1:${stack.natsPort}`);
        assert.ok(tookMs < 4000 + 3000, `took ${tookMs} ms`); // not 3 whole timeouts first
      } finally {
        await Promise.all(silent.map((s) => s.close()));
      }
    });
  });
});
