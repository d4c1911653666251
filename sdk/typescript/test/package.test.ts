/**
 * The package as a user gets it: `npm pack` makes a tarball of the built code, its declarations
 * and sources, the licence, the changelog and the README, and nothing of the tests; installed into
 * an empty folder it imports by its name, from that folder, and works: a bad runner id is an
 * `InvalidRequest`, a closed port an `Unavailable` within `connectTimeout`, a signature 64 hex
 * characters.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { freePort, ROOT } from "./support/stack.js";

const PACKAGE = join(ROOT, "sdk", "typescript");

function npm(args: string[], cwd: string): string {
  const done = spawnSync("npm", args, { cwd, encoding: "utf8", timeout: 180_000 });
  assert.equal(done.status, 0, `npm ${args.join(" ")}: ${done.stdout}\n${done.stderr}`);
  return done.stdout;
}

describe("the npm package", () => {
  const dir = mkdtempSync(join(tmpdir(), "continuity-pack-"));

  after(() => rmSync(dir, { recursive: true, force: true }));

  it("packs the built SDK with its licence and installs into an empty folder", async () => {
    // `npm test` has just built dist/; a user's `npm pack` builds it first (`prepack`).
    const packed = JSON.parse(npm(["pack", "--ignore-scripts", "--json", "--pack-destination", dir], PACKAGE)) as {
      filename: string;
      files: { path: string }[];
    }[];
    const { filename, files } = packed[0]!;
    const paths = files.map((f) => f.path);
    for (const wanted of ["LICENSE", "CHANGELOG.md", "README.md", "package.json", "dist/src/index.js", "dist/src/index.d.ts", "dist/src/checks.js"]) {
      assert.ok(paths.includes(wanted), `${wanted} is packed`);
    }
    assert.deepEqual(paths.filter((p) => p.includes("test") || p.startsWith("examples")), []);
    assert.match(readFileSync(join(PACKAGE, "LICENSE"), "utf8"), /Apache License\s+Version 2\.0, January 2004/);

    const app = join(dir, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    // The dependencies come from npm's cache when `npm ci` filled it.
    npm(["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", join(dir, filename)], app);
    const manifest = JSON.parse(readFileSync(join(app, "node_modules", "@continuity", "runner", "package.json"), "utf8"));
    assert.equal(manifest.license, "Apache-2.0");
    assert.equal(manifest.private, undefined);

    const port = await freePort(); // bound, then closed: nothing listens on it
    writeFileSync(
      join(app, "check.mjs"),
      `import { connect, sign, InvalidRequest, Unavailable } from "@continuity/runner";
const out = { from: import.meta.resolve("@continuity/runner") };
try { await connect({ servers: "nats://127.0.0.1:${port}", runnerId: "runner a" }); }
catch (err) { out.badId = [err instanceof InvalidRequest, err.field]; }
const started = Date.now();
try { await connect({ servers: "nats://127.0.0.1:${port}", runnerId: "runner-a", connectTimeout: 1 }); }
catch (err) { out.closed = [err instanceof Unavailable, err.code, Date.now() - started]; }
out.signature = sign(new Uint8Array(32), "runner-a", "run-1", 1,
  { command: "provider.attach", status: "refused", classification: null, issued_at: "2026-11-30T12:00:00Z" });
console.log(JSON.stringify(out));
`,
    );
    const run = spawnSync(process.execPath, ["check.mjs"], { cwd: app, encoding: "utf8", timeout: 60_000 });
    assert.equal(run.status, 0, run.stderr);
    const out = JSON.parse(run.stdout) as { from: string; badId: unknown; closed: [boolean, string, number]; signature: string };
    assert.ok(out.from.startsWith(`file://${join(app, "node_modules")}`), out.from); // the installed copy
    assert.deepEqual(out.badId, [true, "runner_id"]);
    assert.deepEqual(out.closed.slice(0, 2), [true, "unavailable"]);
    assert.ok(out.closed[2] < 1000 + 3000, `took ${out.closed[2]} ms`);
    assert.match(out.signature, /^[0-9a-f]{64}$/);
  });
});
