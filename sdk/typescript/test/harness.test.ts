/**
 * Harness adapters, without servers: the shipped table and its checks, the matcher (every case of
 * the shared corpus sdk/harness-corpus.json, which the Python SDK's tests play too, and the
 * semantics case by case), version ranges and capabilities, and the presence probe on folder
 * layouts made in a temporary directory (never the host's own).
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, it } from "node:test";
import { harness, InvalidRequest, type FailureClass } from "../src/index.js";
import { ROOT } from "./support/stack.js";

type Table = harness.HarnessTable;

const UUID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
const ID = "0b5e0c9e-1f0a-4c4e-9a43-5c1d2e3f4a5b";

/** A small table of this test's own, beside the shipped one: each rule below is read by a case. */
function fixture(): Table {
  const catchAll = (name: string) => [
    { id: `${name}.failure`, class: "unclassified", when: { exit: "nonzero" }, evidence: ["test"], note: "" },
    { id: `${name}.success`, class: null, when: { exit: "any" }, evidence: ["test"], note: "" },
  ];
  const caps = { resume_keeps_id: true, load: "resume", fork: false, background_agents: false, lock: false, notes: "" };
  return harness.validateTable({
    format: 1,
    version: "2026.12.1",
    harnesses: [
      {
        name: "cli-a",
        title: "CLI A",
        kind: "cli",
        package: "cli-a",
        tested_versions: ["2.1.332"],
        invocation: "a -p PROMPT --resume ID",
        session_id: UUID,
        capabilities: [
          { ...caps, versions: ">=2.0.0 <3.0.0", fork: true },
          { ...caps, versions: ">=1.0.0", resume_keeps_id: false },
        ],
        sessions: {
          root: { env: "CLI_A_DIR", default: "~/.cli-a" },
          paths: ["projects/{cwd_key}/{session_id}.jsonl"],
          cwd_key: "claude",
          keyed_by: ["cwd", "session_id"],
          notes: "",
        },
        rules: [
          { id: "cli-a.busy", class: "session_busy", when: { exit: [3, 42], text: ["busy"] }, evidence: ["test"], note: "" },
          {
            id: "cli-a.json.missing",
            class: "native_session_missing",
            when: { json: [{ path: "is_error", equals: true }, { path: "result", contains: "No conversation" }] },
            evidence: ["test"],
            note: "",
          },
          { id: "cli-a.json.count", class: "context_overflow", when: { json: [{ path: "error.tokens", equals: 1 }] }, evidence: ["test"], note: "" },
          { id: "cli-a.json.in", class: "transcript_corrupt", when: { json: [{ path: "error.kind", in: ["torn", 7, null] }] }, evidence: ["test"], note: "" },
          { id: "cli-a.json.present", class: "session_busy", when: { json: [{ path: "lock.holder", present: true }] }, evidence: ["test"], note: "" },
          { id: "cli-a.benign", class: null, when: { exit: "zero", text: ["failed to record"] }, evidence: ["test"], note: "" },
          { id: "cli-a.is-error", class: "unclassified", when: { json: [{ path: "is_error", equals: true }] }, evidence: ["test"], note: "" },
          {
            id: "cli-a.missing.stderr",
            class: "native_session_missing",
            when: { exit: "nonzero", text: ["No conversation found"], unless_text: ["retrying"] },
            evidence: ["test"],
            note: "",
          },
          ...catchAll("cli-a"),
        ],
      },
      {
        name: "sdk-b",
        title: "SDK B",
        kind: "sdk",
        package: null,
        tested_versions: [],
        invocation: "B.resume(id)",
        session_id: "^[A-Za-z0-9_-]{1,64}$",
        capabilities: [{ ...caps, versions: "" }],
        sessions: null,
        rules: [
          { id: "sdk-b.type", class: "context_overflow", when: { exit: "none", error_type: ["ContextWindowExceededError"] }, evidence: ["test"], note: "" },
          { id: "sdk-b.code", class: "session_busy", when: { error_code: [-32002, "locked"] }, evidence: ["test"], note: "" },
          { id: "sdk-b.error-type", class: "unclassified", when: { exit: "none", error_type: ["Error"] }, evidence: ["test"], note: "" },
          { id: "sdk-b.error", class: "transcript_corrupt", when: { error: true, text: ["torn"] }, evidence: ["test"], note: "" },
          { id: "sdk-b.no-error", class: "session_busy", when: { error: false, exit: "none", text: ["busy"] }, evidence: ["test"], note: "" },
          ...catchAll("sdk-b"),
        ],
      },
      {
        name: "cli-c",
        title: "CLI C",
        kind: "cli",
        package: "cli-c",
        tested_versions: ["0.171.0"],
        invocation: "c exec resume ID",
        session_id: UUID,
        capabilities: [],
        sessions: {
          root: { env: "CLI_C_HOME", default: "~/.cli-c" },
          paths: ["sessions/*/*/*/rollout-*-{session_id}.jsonl", "archived/{session_id}.jsonl", "short/s-*-{session_id_8}.json"],
          cwd_key: null,
          keyed_by: ["session_id"],
          notes: "",
        },
        rules: catchAll("cli-c"),
      },
    ],
  });
}

const outcome = (o: Partial<harness.Outcome>): harness.Outcome => ({ exit_code: 1, stdout: "", stderr: "", ...o });

describe("the harness table", () => {
  it("ships in the package, checked, with the closed harness names in order", () => {
    const table = harness.shippedTable();
    assert.deepEqual(harness.names(table), [
      "claude-code", "codex", "codex-app-server", "gemini-cli", "opencode", "claude-agent-sdk", "openai-agents", "acp",
    ]);
    // The copy in the build is the repository's file, byte for byte.
    assert.equal(readFileSync(harness.SHIPPED_TABLE, "utf8"), readFileSync(join(ROOT, "sdk", "harnesses.json"), "utf8"));
    assert.deepEqual(harness.loadTable(join(ROOT, "sdk", "harnesses.json")), table);
  });

  it("names only harness classes of the contract, and each of them", () => {
    const contractClasses: readonly FailureClass[] = harness.HARNESS_CLASSES; // a compile-time check too
    const named = new Set(harness.shippedTable().harnesses.flatMap((h) => h.rules.map((r) => r.class)));
    assert.deepEqual([...named].filter((c) => c !== null).sort(), [...contractClasses].sort());
    assert.ok(named.has(null), "false positives and successes");
    for (const h of harness.shippedTable().harnesses) {
      for (const version of h.tested_versions) assert.ok(harness.adapter(h.name).capabilities(version), `${h.name} ${version}`);
    }
  });

  it("is in the npm package, and the packed adapters read it", () => {
    const dir = mkdtempSync(join(tmpdir(), "continuity-harness-pack-"));
    try {
      const done = spawnSync("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", dir], {
        cwd: join(ROOT, "sdk", "typescript"),
        encoding: "utf8",
        timeout: 120_000,
      });
      assert.equal(done.status, 0, done.stderr);
      const [packed] = JSON.parse(done.stdout) as { filename: string; files: { path: string }[] }[];
      const paths = packed!.files.map((f) => f.path);
      assert.ok(paths.includes("dist/src/harness/harnesses.json"), "the table is packed");
      assert.ok(!paths.some((p) => p.startsWith("scripts/")), "the build's own script is not");
      assert.equal(spawnSync("tar", ["-xzf", join(dir, packed!.filename), "-C", dir]).status, 0);
      // The harness modules need none of the package's dependencies: imported from the tarball's files.
      const check = `const { adapter } = await import(${JSON.stringify(join(dir, "package", "dist", "src", "harness", "index.js"))});
const a = adapter("claude-code").assess({ exit_code: 1, stderr: "No conversation found with session ID: x" });
console.log(JSON.stringify(a));`;
      const run = spawnSync(process.execPath, ["--input-type=module", "-e", check], { encoding: "utf8", timeout: 60_000 });
      assert.equal(run.status, 0, run.stderr);
      assert.deepEqual(JSON.parse(run.stdout), { failure_class: "native_session_missing", rule: "claude-code.missing.stderr" });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("names an unknown harness", () => {
    assert.throws(() => harness.adapter("claude"), (err) => {
      assert.ok(err instanceof harness.UnknownHarness);
      assert.equal(err.harness, "claude");
      return true;
    });
    assert.throws(() => harness.adapter("cli-b", fixture()), harness.UnknownHarness);
    assert.equal(harness.adapter("cli-a", fixture()).name, "cli-a");
  });

  it("refuses a table that breaks its format, naming where", () => {
    const cases: [string, (t: any) => void, string][] = [
      ["format", (t) => (t.format = 2), "table.format"],
      ["an unknown field", (t) => (t.harnesses[0].extra = 1), "table.harnesses[0].extra"],
      ["a missing field", (t) => delete t.harnesses[0].invocation, "table.harnesses[0].invocation"],
      ["a kind", (t) => (t.harnesses[0].kind = "gui"), "table.harnesses[0].kind"],
      ["a rule id", (t) => (t.harnesses[0].rules[0].id = "cli-a.Busy"), "table.harnesses[0].rules[0].id"],
      ["a rule id of another harness", (t) => (t.harnesses[0].rules[0].id = "sdk-b.busy"), "table.harnesses[0].rules[0].id"],
      ["a rule id twice", (t) => (t.harnesses[0].rules[1].id = "cli-a.busy"), "table.harnesses[0].rules[1].id"],
      ["a harness twice", (t) => t.harnesses.push(t.harnesses[0]), "table.harnesses[3].name"],
      ["a class", (t) => (t.harnesses[0].rules[0].class = "provider_attach_refused"), "table.harnesses[0].rules[0].class"],
      ["a condition", (t) => (t.harnesses[0].rules[0].when.regex = ["a.*"]), "table.harnesses[0].rules[0].when.regex"],
      ["an exit", (t) => (t.harnesses[0].rules[0].when.exit = ["1"]), "table.harnesses[0].rules[0].when.exit"],
      ["a json item with two operators", (t) => (t.harnesses[0].rules[1].when.json[0].in = [true]), "table.harnesses[0].rules[1].when.json[0]"],
      ["a json path", (t) => (t.harnesses[0].rules[1].when.json[0].path = "a..b"), "table.harnesses[0].rules[1].when.json[0].path"],
      ["present false", (t) => (t.harnesses[0].rules[4].when.json[0].present = false), "table.harnesses[0].rules[4].when.json[0].present"],
      ["an error code", (t) => (t.harnesses[1].rules[1].when.error_code = [1.5]), "table.harnesses[1].rules[1].when.error_code[0]"],
      ["no evidence", (t) => (t.harnesses[0].rules[0].evidence = []), "table.harnesses[0].rules[0].evidence"],
      ["a version range", (t) => (t.harnesses[0].capabilities[0].versions = ">=2.0 <3"), "table.harnesses[0].capabilities[0].versions"],
      ["a session id pattern", (t) => (t.harnesses[0].session_id = "[0-9]+"), "table.harnesses[0].session_id"],
      ["a path placeholder", (t) => (t.harnesses[0].sessions.paths = ["{home}/{session_id}"]), "table.harnesses[0].sessions.paths[0]"],
      ["a path leaving the root", (t) => (t.harnesses[0].sessions.paths = ["../{session_id}"]), "table.harnesses[0].sessions.paths[0]"],
      ["a cwd_key scheme", (t) => (t.harnesses[0].sessions.cwd_key = "vscode"), "table.harnesses[0].sessions.cwd_key"],
      ["an error condition", (t) => (t.harnesses[1].rules[3].when.error = "yes"), "table.harnesses[1].rules[3].when.error"],
      ["a path with a backslash", (t) => (t.harnesses[2].sessions.paths = ["a\\{session_id}"]), "table.harnesses[2].sessions.paths[0]"],
      ["a path with **", (t) => (t.harnesses[2].sessions.paths = ["**/{session_id}"]), "table.harnesses[2].sessions.paths[0]"],
      ["a session id pattern ending \\$", (t) => (t.harnesses[0].session_id = "^a\\$"), "table.harnesses[0].session_id"],
      ["a session id pattern not one", (t) => (t.harnesses[0].session_id = "^[a-$"), "table.harnesses[0].session_id"],
      ["a gemini cwd_key scheme", (t) => (t.harnesses[0].sessions.cwd_key = "gemini"), "table.harnesses[0].sessions.cwd_key"],
      ["rules not total", (t) => t.harnesses[2].rules.pop(), "table.harnesses[2].rules"],
      ["a catch-all not last", (t) => t.harnesses[2].rules.reverse(), "table.harnesses[2].rules"],
    ];
    for (const [what, breakIt, path] of cases) {
      const raw = JSON.parse(JSON.stringify(fixture()));
      breakIt(raw);
      assert.throws(() => harness.validateTable(raw), (err) => {
        assert.ok(err instanceof harness.InvalidTable, what);
        assert.equal(err.path, path, what);
        return true;
      }, what);
    }
  });
});

describe("the matcher", () => {
  const a = harness.adapter("cli-a", fixture());
  const b = harness.adapter("sdk-b", fixture());
  const assess = (o: Partial<harness.Outcome>, adapter = a) => adapter.assess(outcome(o));

  it("decides by the first rule that holds, ending with the catch-alls", () => {
    assert.deepEqual(assess({ exit_code: 3, stderr: "session busy" }), { failure_class: "session_busy", rule: "cli-a.busy" });
    assert.deepEqual(assess({ exit_code: 4, stderr: "session busy" }), { failure_class: "unclassified", rule: "cli-a.failure" });
    assert.deepEqual(assess({ exit_code: 0 }), { failure_class: null, rule: "cli-a.success" });
    assert.deepEqual(assess({ exit_code: null }), { failure_class: null, rule: "cli-a.success" });
    assert.deepEqual(assess({ exit_code: -9 }), { failure_class: "unclassified", rule: "cli-a.failure" });
  });

  it("reads text without ANSI escapes, stderr and stdout together, as plain case-sensitive substrings", () => {
    const missing = { failure_class: "native_session_missing", rule: "cli-a.missing.stderr" };
    assert.deepEqual(assess({ stderr: "\x1b[91m\x1b[1mNo conversation\x1b[0m found with session ID" }), missing);
    assert.deepEqual(assess({ stdout: "\x1b]0;title\x07No conversation found" }), missing);
    assert.deepEqual(assess({ stderr: "No conversation", stdout: " found" }).rule, "cli-a.failure"); // joined by a newline
    assert.deepEqual(assess({ stderr: "no conversation found" }).rule, "cli-a.failure");
    assert.deepEqual(assess({ stderr: "No conversation f.und" }).rule, "cli-a.failure"); // no regular expression
    assert.deepEqual(assess({ stderr: "No conversation found, retrying" }).rule, "cli-a.failure"); // unless_text
  });

  it("keeps a false positive before the pattern it guards", () => {
    assert.deepEqual(assess({ exit_code: 0, stderr: "failed to record rollout items" }), { failure_class: null, rule: "cli-a.benign" });
  });

  it("reads JSON documents: stdout whole, else each line; never an array; one document holds all items", () => {
    const doc = { is_error: true, result: "No conversation found with session ID" };
    const missing = { failure_class: "native_session_missing", rule: "cli-a.json.missing" };
    assert.deepEqual(assess({ exit_code: 0, stdout: JSON.stringify(doc, null, 2) }), missing); // whole, over lines
    assert.deepEqual(assess({ exit_code: 0, stdout: `progress\n{"type":"x"}\n  \x1b[2m${JSON.stringify(doc)}\x1b[0m  \n` }), missing);
    assert.deepEqual(assess({ exit_code: 0, stdout: JSON.stringify([doc]) }).rule, "cli-a.success");
    // The two items in two documents: no document holds both.
    const split = `${JSON.stringify({ is_error: true })}\n${JSON.stringify({ result: "No conversation" })}`;
    assert.deepEqual(assess({ exit_code: 0, stdout: split }), { failure_class: "unclassified", rule: "cli-a.is-error" });
    // is_error at exit 0 is a failure, never success.
    assert.deepEqual(assess({ exit_code: 0, stdout: '{"is_error": true, "result": "ok"}' }).failure_class, "unclassified");
  });

  it("compares strictly: 1 is not \"1\" nor true, null is a value, paths go through objects only", () => {
    const count = (tokens: unknown) => assess({ exit_code: 0, stdout: JSON.stringify({ error: { tokens } }) }).rule;
    assert.equal(count(1), "cli-a.json.count");
    assert.equal(count(1.0), "cli-a.json.count");
    assert.equal(count("1"), "cli-a.success");
    assert.equal(count(true), "cli-a.success");
    assert.equal(count([1]), "cli-a.success");
    const kind = (value: unknown) => assess({ exit_code: 0, stdout: JSON.stringify({ error: { kind: value } }) }).rule;
    assert.equal(kind("torn"), "cli-a.json.in");
    assert.equal(kind(7), "cli-a.json.in");
    assert.equal(kind(null), "cli-a.json.in");
    assert.equal(kind("7"), "cli-a.success");
    assert.equal(kind(false), "cli-a.success");
    assert.equal(assess({ exit_code: 0, stdout: '{"error": [{"kind": "torn"}]}' }).rule, "cli-a.success");
    assert.equal(assess({ exit_code: 0, stdout: '{"error.kind": "torn"}' }).rule, "cli-a.success");
    // contains: only a string contains; present: any value, null too.
    assert.equal(assess({ exit_code: 0, stdout: '{"is_error": true, "result": ["No conversation"]}' }).rule, "cli-a.is-error");
    assert.equal(assess({ exit_code: 0, stdout: '{"lock": {"holder": null}}' }).rule, "cli-a.json.present");
    assert.equal(assess({ exit_code: 0, stdout: '{"lock": {}}' }).rule, "cli-a.success");
    assert.ok(harness.jsonEqual({ a: [1, { b: null }] }, { a: [1, { b: null }] }));
    assert.ok(!harness.jsonEqual({ a: 1 }, { a: 1, b: undefined }));
    assert.ok(!harness.jsonEqual(0, false));
    assert.ok(!harness.jsonEqual("", null));
  });

  it("matches exit codes as listed and errors by type and code, strictly", () => {
    assert.equal(assess({ exit_code: 42, stderr: "busy" }).rule, "cli-a.busy");
    assert.equal(assess({ exit_code: null, stderr: "busy" }).rule, "cli-a.success");
    const sdk = (error: harness.OutcomeError | null, exit_code: number | null = null) => assess({ exit_code, error }, b).rule;
    assert.equal(sdk({ type: "ContextWindowExceededError", code: null }), "sdk-b.type");
    assert.equal(sdk({ type: "ContextWindowExceededError", code: null }, 1), "sdk-b.failure"); // exit none only
    assert.equal(sdk({ type: "contextwindowexceedederror", code: null }), "sdk-b.success");
    assert.equal(sdk({ type: null, code: -32002 }), "sdk-b.code");
    assert.equal(sdk({ type: null, code: "-32002" }), "sdk-b.success");
    assert.equal(sdk({ type: null, code: "locked" }), "sdk-b.code");
    assert.equal(sdk({ type: "Error", code: null }), "sdk-b.error-type");
    assert.equal(sdk(null), "sdk-b.success");
  });

  it("tells an outcome with an error from one without, and fills the fields left out", () => {
    assert.equal(b.assess({ exit_code: 3, error: { type: "X" }, stderr: "torn" }).rule, "sdk-b.error");
    assert.equal(b.assess({ exit_code: 3, error: null, stderr: "torn" }).rule, "sdk-b.failure");
    assert.equal(b.assess({ exit_code: null, stdout: "busy" }).rule, "sdk-b.no-error");
    assert.equal(b.assess({ exit_code: null, stdout: "busy", error: {} }).rule, "sdk-b.success"); // an error, all null
    assert.deepEqual(harness.checkOutcome({ exit_code: null }), { exit_code: null, stdout: "", stderr: "", error: null });
  });

  it("refuses an outcome that is not one, naming the field", () => {
    const bad: [unknown, string][] = [
      [null, "outcome"],
      [{ exit_code: "1", stdout: "", stderr: "" }, "exit_code"],
      [{ exit_code: true, stdout: "", stderr: "" }, "exit_code"],
      [{ exit_code: 1.5, stdout: "", stderr: "" }, "exit_code"],
      [{ stdout: "", stderr: "" }, "outcome"], // exit_code missing: null says "none"
      [{ exit_code: 1, stdout: null, stderr: "" }, "stdout"],
      [{ exit_code: 1, stdout: "", stderr: 2 }, "stderr"],
      [{ exit_code: 1, stdout: "", stderr: "", error: "boom" }, "error"],
      [{ exit_code: 1, stdout: "", stderr: "", error: { type: 1, code: null } }, "error.type"],
      [{ exit_code: 1, stdout: "", stderr: "", error: { type: null, code: true } }, "error.code"],
      [{ exit_code: 1, stdout: "", stderr: "", error: { type: null, code: null, message: "x" } }, "error"],
      [{ exit_code: 1, stdout: "", stderr: "", signal: "SIGKILL" }, "outcome"],
      [{ exit_code: 2 ** 53, stdout: "", stderr: "" }, "exit_code"],
      [{ exit_code: 1, error: { type: null, code: -(2 ** 53) } }, "error.code"],
    ];
    for (const [raw, field] of bad) {
      assert.throws(() => a.assess(raw as harness.Outcome), (err) => {
        assert.ok(err instanceof InvalidRequest, JSON.stringify(raw));
        assert.equal(err.code, "invalid_field");
        assert.equal(err.field, field);
        return true;
      });
    }
  });

  it("refuses an outcome over 4 MiB in all, and reads documents within 1,000 lines and 1 MiB", () => {
    const mib = 1024 * 1024;
    assert.throws(() => a.assess(outcome({ stdout: "x".repeat(2 * mib), stderr: "y".repeat(2 * mib + 1) })), (err) => {
      assert.ok(err instanceof InvalidRequest);
      assert.equal(err.code, "payload_too_large");
      assert.match(err.message, /4194304/);
      return true;
    });
    // UTF-8 bytes, not characters: 2 MiB + 1 of "é" is over.
    assert.throws(() => a.assess(outcome({ stdout: "é".repeat(mib + 1), stderr: "é".repeat(mib) })), InvalidRequest);
    assert.equal(a.assess(outcome({ stdout: "x".repeat(4 * mib) })).rule, "cli-a.failure");
    const doc = '{"lock": {"holder": 1}}';
    assert.equal(assess({ exit_code: 0, stdout: `${"-\n".repeat(999)}${doc}` }).rule, "cli-a.json.present"); // line 1,000
    assert.equal(assess({ exit_code: 0, stdout: `${"-\n".repeat(1000)}${doc}` }).rule, "cli-a.success"); // line 1,001
    const pad = "x".repeat(mib - doc.length - 1);
    assert.equal(assess({ exit_code: 0, stdout: `${pad}\n${doc}` }).rule, "cli-a.json.present"); // ends at 1 MiB
    assert.equal(assess({ exit_code: 0, stdout: `${pad}x\n${doc}` }).rule, "cli-a.success"); // one byte over
  });
});

interface CorpusCase {
  id: string;
  harness: string;
  outcome: harness.Outcome;
  expect: harness.Assessment;
  source: string;
}

describe("the shared corpus", () => {
  const corpus = JSON.parse(readFileSync(join(ROOT, "sdk", "harness-corpus.json"), "utf8")) as { format: number; cases: CorpusCase[] };

  it("holds at least 40 cases over at least 6 harnesses, false positives among them, each with its source", () => {
    assert.equal(corpus.format, 1);
    assert.ok(corpus.cases.length >= 40, `${corpus.cases.length} cases`);
    assert.ok(new Set(corpus.cases.map((c) => c.harness)).size >= 6);
    assert.ok(corpus.cases.some((c) => c.expect.failure_class === null && c.outcome.exit_code !== 0), "a false positive");
    assert.equal(new Set(corpus.cases.map((c) => c.id)).size, corpus.cases.length, "ids are unique");
    for (const c of corpus.cases) assert.ok(c.source.length > 0, c.id);
  });

  it("classifies every case as the Python SDK's tests expect", () => {
    const wrong = corpus.cases
      .map((c) => ({ id: c.id, expect: c.expect, got: harness.adapter(c.harness).assess(c.outcome) }))
      .filter(({ expect, got }) => got.failure_class !== expect.failure_class || got.rule !== expect.rule);
    assert.deepEqual(wrong, []);
  });

  it("decides each case by a rule of its own harness", () => {
    for (const c of corpus.cases) assert.ok(c.expect.rule.startsWith(`${c.harness}.`), c.id);
  });
});

describe("versions and capabilities", () => {
  it("holds what the Python SDK's ranges hold", () => {
    const cases: [string, string, boolean][] = [
      ["2.1.332", ">=2.0.0", true],
      ["2.1.332", ">=2.0.0 <2.1.332", false],
      ["2.1.332", ">2.1.331 <=2.1.332", true],
      ["2.1.332", "=2.1.332", true],
      ["2.1.0-beta.1", "=2.1.0", true],
      ["2.1.0+build.7", "<2.1.1", true],
      ["v0.61.0", ">=0.61.0", true],
      ["2", ">=2.0.0 <2.0.1", true],
      ["2.10.0", ">2.9.0", true],
      ["1.18.33", ">=1.18.0 <1.19.0", true],
      ["1.19.0", ">=1.18.0 <1.19.0", false],
      ["anything", "", false],
      ["0.0.0", "", true],
      [" 1.2.3\u0085", "=1.2.3", true], // stripped as Python strips
      ["\ufeff1.2.3", "=1.2.3", false],
      ["1.2.3-rc\n1", "=1.2.3", true],
      ["99999999999999999999.0.0", ">9007199254740993.0.0", true], // beyond 2^53, exactly
    ];
    for (const [version, range, holds] of cases) assert.equal(harness.satisfies(version, range), holds, `${version} ${range}`);
    for (const bad of [">=2.1", ">= 2.1.0", "~2.1.0", ">=02.1.0", ">=2.1.0 ", "2.1.0", ">=2.1.0-rc"]) {
      assert.throws(() => harness.parseRange(bad), RangeError, bad);
    }
  });

  it("compares numerically part by part, ignoring pre-release suffixes", () => {
    assert.ok(harness.satisfies("2.10.0", ">=2.9.0"));
    assert.ok(!harness.satisfies("2.9.0", ">=2.10.0"));
    assert.ok(harness.satisfies("2.1.0-beta.1", "=2.1.0"));
    assert.ok(harness.satisfies("1.0.0", ""));
    assert.ok(harness.satisfies("1.2.3", ">1.2.2 <=1.2.3"));
    assert.ok(!harness.satisfies("1.2.4", ">1.2.2 <=1.2.3"));
    assert.ok(!harness.satisfies("nightly", ""));
    assert.throws(() => harness.parseRange(">=1.2"), RangeError);
    assert.throws(() => harness.parseRange("~1.2.0"), RangeError);
    assert.throws(() => harness.parseRange(">= 1.2.0"), RangeError);
  });

  it("answers the shipped table's capabilities by version", () => {
    const claude = harness.adapter("claude-code");
    const tested = claude.capabilities("2.1.332");
    assert.ok(tested !== null && tested.resume_keeps_id && tested.background_agents);
    assert.equal(claude.capabilities("1.0.65")?.resume_keeps_id, false); // claude-code#4926
    assert.equal(claude.capabilities("0.2.9"), null);
    assert.equal(claude.capabilities("not a version"), null);
    assert.deepEqual(harness.adapter("codex").capabilities("v0.171.0-alpha.3"), harness.adapter("codex").capabilities("0.171.0"));
    assert.equal(harness.adapter("opencode").capabilities("1.19.0"), null);
    assert.equal(harness.adapter("acp").capabilities("1")?.load, "session/load");
  });

  it("answers the first capabilities whose range holds the version", () => {
    const a = harness.adapter("cli-a", fixture());
    assert.equal(a.capabilities("2.1.332")?.fork, true);
    assert.equal(a.capabilities("3.0.0")?.resume_keeps_id, false);
    assert.equal(a.capabilities("0.9.0"), null);
    assert.equal(harness.adapter("sdk-b", fixture()).capabilities("0.0.1")?.versions, "");
  });
});

describe("the presence probe", () => {
  const base = mkdtempSync(join(tmpdir(), "continuity-probe-"));
  after(() => rmSync(base, { recursive: true, force: true }));
  let n = 0;
  const home = () => {
    const dir = join(base, `home-${n++}`);
    mkdirSync(dir);
    return dir;
  };
  const touch = (path: string) => {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, "");
  };
  const a = harness.adapter("cli-a", fixture());
  const c = harness.adapter("cli-c", fixture());

  it("finds a session under the cwd key it was saved in, below HOME or the root variable", async () => {
    const h = home();
    const cwd = "/work/my.app_2";
    assert.equal(harness.cwdKey("claude", cwd), "-work-my-app-2");
    assert.equal(await a.probe(ID, { cwd, env: { HOME: h } }), "absent"); // no root yet
    touch(join(h, ".cli-a", "projects", "-work-my-app-2", `${ID}.jsonl`));
    assert.equal(await a.probe(ID, { cwd, env: { HOME: h } }), "present");
    assert.equal(await a.probe(ID, { cwd: "/work/other", env: { HOME: h } }), "absent");
    assert.equal(await a.probe(ID.replace("0b", "1b"), { cwd, env: { HOME: h } }), "absent");
    const moved = home();
    assert.equal(await a.probe(ID, { cwd, env: { HOME: h, CLI_A_DIR: moved } }), "absent");
    touch(join(moved, "projects", "-work-my-app-2", `${ID}.jsonl`));
    assert.equal(await a.probe(ID, { cwd, env: { HOME: "/nonexistent", CLI_A_DIR: moved } }), "present");
    assert.equal(await a.probe(ID, { cwd, env: { HOME: h, CLI_A_DIR: "" } }), "present"); // empty: the default
  });

  it("counts only a regular file: not a folder; a link to a file, yes", async () => {
    const h = home();
    const cwd = "/srv/app";
    mkdirSync(join(h, ".cli-a", "projects", "-srv-app", `${ID}.jsonl`), { recursive: true });
    assert.equal(await a.probe(ID, { cwd, env: { HOME: h } }), "absent");
    const other = "7c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
    touch(join(h, "elsewhere.jsonl"));
    symlinkSync(join(h, "elsewhere.jsonl"), join(h, ".cli-a", "projects", "-srv-app", `${other}.jsonl`));
    assert.equal(await a.probe(other, { cwd, env: { HOME: h } }), "present");
  });

  it("matches * within one segment", async () => {
    const h = home();
    const env = { HOME: h };
    assert.equal(await c.probe(ID, { env }), "absent");
    touch(join(h, ".cli-c", "sessions", "2026", "12", "01", `rollout-2026-12-01T10-00-00-${ID}.jsonl`));
    assert.equal(await c.probe(ID, { env }), "present");
    const other = "7c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
    touch(join(h, ".cli-c", "sessions", "2026", "12", `rollout-x-${other}.jsonl`)); // one level short
    touch(join(h, ".cli-c", "sessions", "2026", "12", "01", "02", `rollout-x-${other}.jsonl`)); // one deeper
    assert.equal(await c.probe(other, { env }), "absent");
    touch(join(h, ".cli-c", "archived", `${other}.jsonl`)); // the second path
    assert.equal(await c.probe(other, { env }), "present");
    const third = "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b";
    touch(join(h, ".cli-c", "short", "s-2026-9e8d7c6b.json")); // {session_id_8}: the first 8 characters
    assert.equal(await c.probe(third, { env }), "present");
    touch(join(h, ".cli-c", "short", "s-2026-9e8d7c6.json"));
    assert.equal(await c.probe("9e8d7c60-0000-4000-8000-000000000000", { env }), "absent");
  });

  it("is unknown where the harness keeps no files, or without HOME or cwd to find them", async () => {
    assert.equal(await harness.adapter("sdk-b", fixture()).probe("sess_1", { env: {} }), "unknown");
    assert.equal(await c.probe(ID, { env: {} }), "unknown");
    assert.equal(await c.probe(ID, { env: { HOME: "relative/home" } }), "unknown");
    assert.equal(await a.probe(ID, { env: { HOME: home() } }), "unknown"); // keyed by cwd, none given
    assert.equal(await a.probe(ID, { cwd: "relative", env: { HOME: home() } }), "unknown");
  });

  it("answers absent for a session id not of the harness, never using it in a path", async () => {
    const h = home();
    const cwd = "/srv/app";
    // Files where a hostile id would lead if it were used in a path.
    touch(join(h, ".cli-a", "projects", "secret.jsonl"));
    touch(join(h, ".cli-a", "projects", "-srv-app", "a*.jsonl"));
    touch(join(h, ".cli-c", "archived", "x.jsonl"));
    for (const id of ["../secret", `${ID}/../../secret`, "*", `${ID}\n`, "", ID.toUpperCase()]) {
      assert.equal(await a.probe(id, { cwd, env: { HOME: h } }), "absent", JSON.stringify(id));
      assert.equal(await c.probe(id, { env: { HOME: h } }), "absent", JSON.stringify(id));
    }
    assert.equal(await harness.adapter("sdk-b", fixture()).probe("../x", { env: { HOME: h } }), "absent");
  });
  it("finds a Claude Code session under its cwd key, or under any project folder", async () => {
    const claude = harness.adapter("claude-code");
    const h = home();
    const cwd = "/work/my.app_2";
    const id = "0b3c9a2e-1111-4222-8333-444455556666";
    assert.equal(await claude.probe(id, { cwd, env: { HOME: h } }), "absent");
    touch(join(h, ".claude", "projects", "-work-my-app-2", `${id}.jsonl`));
    assert.equal(await claude.probe(id, { cwd, env: { HOME: h } }), "present");
    assert.equal(await claude.probe(id, { cwd: "/elsewhere", env: { HOME: h } }), "present"); // the second path
    assert.equal(await claude.probe(id, { env: { HOME: h } }), "unknown"); // keyed by cwd: none given
    const config = home();
    assert.equal(await claude.probe(id, { cwd, env: { HOME: h, CLAUDE_CONFIG_DIR: config } }), "absent");
    touch(join(config, "projects", "pinned", `${id}.jsonl`));
    assert.equal(await claude.probe(id, { cwd, env: { HOME: h, CLAUDE_CONFIG_DIR: config } }), "present");
    assert.equal(await harness.adapter("claude-agent-sdk").probe(id, { cwd, env: { HOME: h } }), "present");
  });

  it("keys a working directory as Claude Code does: per UTF-16 unit, long paths cut and hashed, a plain override", () => {
    // The hash as Claude Code 2.1.332's own code writes it: (t << 5) - t + unit | 0, base 36.
    const hash = (text: string) => {
      let t = 0;
      for (let i = 0; i < text.length; i++) t = ((t << 5) - t + text.charCodeAt(i)) | 0;
      return Math.abs(t).toString(36);
    };
    assert.equal(harness.claudeKey("/home/jürgen/😀 x"), "-home-j-rgen----x");
    const long = `/work/${"a".repeat(240)}`;
    const key = harness.claudeKey(long);
    assert.equal(key, `-work-${"a".repeat(194)}-${hash(long)}`);
    assert.equal(harness.claudeKey(`/work/${"a".repeat(194)}`).length, 200); // not cut at 200
    const env = { CLAUDE_CONFIG_DIR: "/cfg", CLAUDE_CODE_PROJECT_DIR_NAME: "my_proj-1" };
    assert.equal(harness.claudeKey("/work/app", env), "my_proj-1");
    assert.equal(harness.claudeKey("/work/app", { CLAUDE_CODE_PROJECT_DIR_NAME: "my_proj-1" }), "-work-app");
    assert.equal(harness.claudeKey("/work/app", { ...env, CLAUDE_CODE_PROJECT_DIR_NAME: "../x" }), "-work-app");
    assert.equal(harness.claudeKey("/work/app", { ...env, CLAUDE_CODE_PROJECT_DIR_NAME: "COM1" }), "-work-app");
    assert.equal(harness.cwdKey("claude", "/a/b"), "-a-b");
  });

  it("finds a Codex rollout in any date folder or archived, under CODEX_HOME or ~/.codex", async () => {
    for (const name of ["codex", "codex-app-server"]) {
      const codex = harness.adapter(name);
      const h = home();
      const id = "019a8c3e-5b7d-7f10-9a2b-3c4d5e6f7a8b";
      assert.equal(await codex.probe(id, { env: { HOME: h } }), "absent");
      touch(join(h, ".codex", "sessions", "2026", "12", "01", `rollout-2026-12-01T10-00-00-${id}.jsonl`));
      assert.equal(await codex.probe(id, { env: { HOME: h } }), "present");
      const moved = home();
      assert.equal(await codex.probe(id, { env: { HOME: h, CODEX_HOME: moved } }), "absent");
      touch(join(moved, "archived_sessions", `rollout-2026-11-30T09-00-00-${id}.jsonl`));
      assert.equal(await codex.probe(id, { env: { HOME: h, CODEX_HOME: moved } }), "present");
      touch(join(moved, "thread-writer-locks", `${id.replace("019a", "119a")}.lock`)); // a lock is no rollout
      assert.equal(await codex.probe(id.replace("019a", "119a"), { env: { CODEX_HOME: moved } }), "absent");
    }
  });

  it("finds a Gemini CLI chat by the id's first 8 characters in any project's chats", async () => {
    const gemini = harness.adapter("gemini-cli");
    const h = home();
    const id = "5f1e2d3c-4b5a-4968-8776-655443322110";
    assert.equal(await gemini.probe(id, { env: { HOME: h } }), "absent");
    touch(join(h, ".gemini", "tmp", "my-app", "chats", "session-2026-12-01T10-00-5f1e2d3c.jsonl"));
    assert.equal(await gemini.probe(id, { env: { HOME: h } }), "present");
    const other = home();
    touch(join(other, ".gemini", "tmp", "my-app-1", "chats", "session-2026-11-01T10-00-5f1e2d3c.json")); // older versions
    assert.equal(await gemini.probe(id, { env: { HOME: h, GEMINI_CLI_HOME: other } }), "present");
    assert.equal(await gemini.probe("5f1e2d3d-0000-0000-0000-000000000000", { env: { HOME: h } }), "absent");
  });

  it("cannot tell for a harness whose sessions are in a database or behind an API", async () => {
    const env = { HOME: home() };
    assert.equal(await harness.adapter("opencode").probe("ses_0123456789abcdefABCDEFghij", { env }), "unknown");
    assert.equal(await harness.adapter("opencode").probe("ses_short", { env }), "absent"); // not an id of it
    assert.equal(await harness.adapter("openai-agents").probe("resp_123", { env }), "unknown");
    assert.equal(await harness.adapter("acp").probe("sess-1", { env }), "unknown");
  });

  it("never opens a file: a FIFO named like a session is no session, and does not block", async () => {
    const claude = harness.adapter("claude-code");
    const h = home();
    const id = "0b3c9a2e-1111-4222-8333-444455556666";
    mkdirSync(join(h, ".claude", "projects", "-srv"), { recursive: true });
    const made = spawnSync("mkfifo", [join(h, ".claude", "projects", "-srv", `${id}.jsonl`)]);
    assert.equal(made.status, 0, String(made.stderr));
    assert.equal(await claude.probe(id, { cwd: "/srv", env: { HOME: h } }), "absent");
  });

  it("answers absent, touching nothing, for a hostile id of a real harness", async () => {
    const h = home();
    touch(join(h, ".claude", "projects", "secret.jsonl"));
    touch(join(h, ".codex", "sessions", "a", "b", "c", "rollout-x-.jsonl"));
    for (const id of ["../secret", "*", "..", "", "0b3c9a2e-1111-4222-8333-444455556666\n", "0B3C9A2E-1111-4222-8333-444455556666"]) {
      for (const name of ["claude-code", "codex", "gemini-cli"]) {
        assert.equal(await harness.adapter(name).probe(id, { cwd: "/srv", env: { HOME: h } }), "absent", `${name} ${JSON.stringify(id)}`);
      }
    }
    // gemini's ids may be short: one that is a plain name is looked up, never one that is a path.
    assert.equal(await harness.adapter("gemini-cli").probe("..", { env: { HOME: h } }), "absent");
  });
});
