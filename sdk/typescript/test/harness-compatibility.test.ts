/**
 * Compatibility components: every vector of sdk/compatibility-vectors.json, which the Python SDK's
 * tests play too, gives the same canonical JSON, digests and generation here; the refused inputs
 * are refused with the same kind of error; the changed names and the `executable` helper agree.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { harness } from "../src/index.js";
import { ROOT } from "./support/stack.js";

interface Vectors {
  format: number;
  names: string[];
  cases: {
    id: string;
    components: Record<string, unknown>;
    canonical: Record<string, string>;
    digests: Record<string, string>;
    generation: string;
    same_generation_as?: string;
  }[];
  refused: { id: string; components: Record<string, unknown>; error: "type" | "value" }[];
  changed: { id: string; saved: Record<string, unknown>; ready: Record<string, unknown>; changed: string[] }[];
  executable: { harness: string; version: string; executable: string | null }[];
}

const vectors = JSON.parse(readFileSync(join(ROOT, "sdk", "compatibility-vectors.json"), "utf8")) as Vectors;

describe("compatibility components", () => {
  it("has the closed names, in the generation's order", () => {
    assert.equal(vectors.format, 1);
    assert.deepEqual([...harness.COMPONENT_NAMES], vectors.names);
  });

  it("computes every vector's canonical JSON, digests and generation", () => {
    assert.ok(vectors.cases.length >= 10);
    for (const c of vectors.cases) {
      const components = new harness.Components(c.components);
      assert.deepEqual(components.canonical(), c.canonical, c.id);
      assert.deepEqual(components.digests(), c.digests, c.id);
      assert.deepEqual(Object.keys(components.digests()), Object.keys(c.digests).sort(), `${c.id}: sorted by name`);
      assert.equal(components.generation, c.generation, c.id);
      assert.equal(harness.generationOf(c.digests), c.generation, c.id);
      for (const [name, value] of Object.entries(c.components)) {
        assert.equal(harness.componentDigest(name, value), c.digests[name], `${c.id}: ${name}`);
      }
      if (c.same_generation_as !== undefined) {
        const other = vectors.cases.find((k) => k.id === c.same_generation_as);
        assert.equal(other?.generation, c.generation, `${c.id} = ${c.same_generation_as}`);
      }
    }
  });

  it("refuses what the vectors refuse, with the same kind of error", () => {
    for (const r of vectors.refused) {
      assert.throws(() => new harness.Components(r.components as harness.ComponentValues).generation, (err) => {
        assert.ok(err instanceof (r.error === "type" ? TypeError : RangeError), `${r.id}: ${String(err)}`);
        return true;
      }, r.id);
    }
  });

  it("names the changed components, never their values", () => {
    for (const c of vectors.changed) {
      const saved = new harness.Components(c.saved);
      const ready = new harness.Components(c.ready);
      assert.deepEqual(ready.changedFrom(saved), c.changed, c.id);
      assert.deepEqual(harness.changedComponents(saved.digests(), ready.digests()), c.changed, c.id);
    }
  });

  it("makes the executable component from a harness and its version", () => {
    for (const e of vectors.executable) {
      if (e.executable === null) assert.throws(() => harness.executable(e.harness, e.version), RangeError, JSON.stringify(e));
      else assert.equal(harness.executable(e.harness, e.version), e.executable);
    }
  });

  it("orders a set by code point, not by UTF-16 unit", () => {
    assert.deepEqual(harness.canonicalValue("plugins", ["\uffff", "😀", "a"]), ["a", "\uffff", "😀"]);
    assert.ok(["\uffff", "😀"].sort()[0] === "😀", "JavaScript's own sort differs");
  });
});
