/**
 * The harness table (`harnesses.json`, shipped inside this package): for each agent harness, its
 * session ids, what each version can do, where it keeps its sessions (the presence probe) and the
 * ordered rules that turn a failed resume's outcome into a closed failure class. The Python SDK
 * ships the same file; both SDKs read it with the same checks.
 */

import { readFileSync } from "node:fs";
import { parseRange } from "./versions.js";

/** The failure classes a harness rule may name (contract 4.3); null in a rule: not a failure. */
export const HARNESS_CLASSES = [
  "native_session_missing",
  "context_overflow",
  "transcript_corrupt",
  "session_busy",
  "unclassified",
] as const;
export type HarnessClass = (typeof HARNESS_CLASSES)[number];

export const HARNESS_KINDS = ["cli", "sdk", "protocol"] as const;
export type HarnessKind = (typeof HARNESS_KINDS)[number];

/** How a working directory becomes the folder name a harness keeps its sessions under. */
export const CWD_KEYS = ["claude"] as const;
export type CwdKey = (typeof CWD_KEYS)[number];

/** What a path template may name: the session id, its first 8 characters (all of it when
 * shorter), and the working directory's key. */
export const PLACEHOLDERS = ["{session_id}", "{session_id_8}", "{cwd_key}"] as const;

export const RULE_ID = /^[a-z0-9][a-z0-9.-]{0,63}$/;
const NAME = /^[a-z0-9][a-z0-9-]{0,63}$/;

/** What the versions in `versions` (a range, see versions.ts) of a harness can do. */
export interface Capabilities {
  versions: string;
  /** A resumed session keeps its id (else the harness answers with a new one to commit). */
  resume_keeps_id: boolean;
  /** How a saved session is loaded (`resume`, `thread/resume`, `session/load`...). */
  load: string;
  fork: boolean;
  background_agents: boolean;
  /** The harness locks a session against a second writer. */
  lock: boolean;
  notes: string;
}

export interface SessionsRoot {
  /** The environment variable that moves the root, or null. */
  env: string | null;
  /** The root when `env` is unset or empty; `~` is the probe's HOME. */
  default: string;
}

/** Where a harness keeps its sessions on the host (the presence probe). */
export interface SessionsSpec {
  root: SessionsRoot;
  /** Relative to the root, `/`-separated; `{session_id}`, `{session_id_8}`, `{cwd_key}`, and `*`
   * within one segment. */
  paths: string[];
  cwd_key: CwdKey | null;
  keyed_by: string[];
  notes: string;
}

export type ExitCondition = "zero" | "nonzero" | "none" | "any" | number[];

/** One item of a `json` condition: `path` and exactly one of `equals`, `in`, `contains`, `present`. */
export interface JsonCondition {
  path: string;
  equals?: unknown;
  in?: unknown[];
  contains?: string;
  present?: true;
}

export interface When {
  exit?: ExitCondition;
  json?: JsonCondition[];
  /** true: the outcome has an `error` (an SDK's exception); false: it has none. */
  error?: boolean;
  error_type?: string[];
  error_code?: (string | number)[];
  text?: string[];
  unless_text?: string[];
}

export interface Rule {
  id: string;
  class: HarnessClass | null;
  when: When;
  evidence: string[];
  note: string;
}

export interface HarnessSpec {
  name: string;
  title: string;
  kind: HarnessKind;
  package: string | null;
  tested_versions: string[];
  invocation: string;
  /** A regular expression a session id of this harness matches, whole. */
  session_id: string;
  capabilities: Capabilities[];
  sessions: SessionsSpec | null;
  rules: Rule[];
}

export interface HarnessTable {
  format: 1;
  version: string;
  harnesses: HarnessSpec[];
}

/** The table does not hold to its format; `path` is where (`harnesses[0].rules[3].when.exit`). */
export class InvalidTable extends Error {
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(`${path}: ${why}`);
    this.name = "InvalidTable";
  }
}

type Obj = Record<string, unknown>;

function isObject(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function object(value: unknown, path: string, keys: readonly string[], optional: readonly string[] = []): Obj {
  if (!isObject(value)) throw new InvalidTable(path, "must be an object");
  for (const key of Object.keys(value)) {
    if (!keys.includes(key) && !optional.includes(key)) throw new InvalidTable(`${path}.${key}`, "is not a field of the table");
  }
  for (const key of keys) if (!(key in value)) throw new InvalidTable(`${path}.${key}`, "is missing");
  return value;
}

function string(value: unknown, path: string): string {
  if (typeof value !== "string") throw new InvalidTable(path, "must be a string");
  return value;
}

function nonEmpty(value: unknown, path: string): string {
  if (string(value, path) === "") throw new InvalidTable(path, "must not be empty");
  return value as string;
}

function stringOrNull(value: unknown, path: string): string | null {
  return value === null ? null : nonEmpty(value, path);
}

function bool(value: unknown, path: string): boolean {
  if (typeof value !== "boolean") throw new InvalidTable(path, "must be true or false");
  return value;
}

function array(value: unknown, path: string, min = 0): unknown[] {
  if (!Array.isArray(value)) throw new InvalidTable(path, "must be a list");
  if (value.length < min) throw new InvalidTable(path, `must hold at least ${min}`);
  return value;
}

function strings(value: unknown, path: string, min = 0): string[] {
  return array(value, path, min).map((item, i) => nonEmpty(item, `${path}[${i}]`));
}

function isInteger(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value);
}

function oneOf<T extends string>(value: unknown, values: readonly T[], path: string): T {
  if (typeof value !== "string" || !(values as readonly string[]).includes(value)) {
    throw new InvalidTable(path, `must be one of ${values.join(", ")}`);
  }
  return value as T;
}

/** A session id pattern: a regular expression both SDKs read alike, anchored at both ends. */
function sessionIdPattern(value: unknown, path: string): string {
  const pattern = nonEmpty(value, path);
  if (!pattern.startsWith("^") || !pattern.endsWith("$") || pattern.endsWith("\\$")) throw new InvalidTable(path, "must be anchored with ^ and $");
  try {
    new RegExp(pattern, "u");
  } catch {
    throw new InvalidTable(path, "is not a regular expression");
  }
  return pattern;
}

function capabilities(value: unknown, path: string): Capabilities {
  const keys = ["versions", "resume_keeps_id", "load", "fork", "background_agents", "lock", "notes"];
  const c = object(value, path, keys);
  const versions = string(c.versions, `${path}.versions`);
  try {
    parseRange(versions);
  } catch (err) {
    throw new InvalidTable(`${path}.versions`, (err as Error).message);
  }
  return {
    versions,
    resume_keeps_id: bool(c.resume_keeps_id, `${path}.resume_keeps_id`),
    load: nonEmpty(c.load, `${path}.load`),
    fork: bool(c.fork, `${path}.fork`),
    background_agents: bool(c.background_agents, `${path}.background_agents`),
    lock: bool(c.lock, `${path}.lock`),
    notes: string(c.notes, `${path}.notes`),
  };
}

function sessions(value: unknown, path: string): SessionsSpec | null {
  if (value === null) return null;
  const s = object(value, path, ["root", "paths", "cwd_key", "keyed_by", "notes"]);
  const r = object(s.root, `${path}.root`, ["env", "default"]);
  const paths = strings(s.paths, `${path}.paths`, 1);
  const cwdKey = s.cwd_key === null ? null : oneOf(s.cwd_key, CWD_KEYS, `${path}.cwd_key`);
  paths.forEach((p, i) => {
    const where = `${path}.paths[${i}]`;
    if (p.startsWith("/") || p.split("/").some((seg) => seg === "" || seg === "." || seg === "..")) {
      throw new InvalidTable(where, "must be a relative path of non-empty segments, without . or ..");
    }
    const rest = PLACEHOLDERS.reduce((text, placeholder) => text.replaceAll(placeholder, ""), p);
    if (rest.includes("{") || rest.includes("}")) throw new InvalidTable(where, `names a placeholder other than ${PLACEHOLDERS.join(", ")}`);
    if (p.includes("{cwd_key}") && cwdKey === null) throw new InvalidTable(where, "uses {cwd_key} without a cwd_key scheme");
    if (p.includes("**") || p.includes("\\") || p.includes("\0")) {
      throw new InvalidTable(where, "* matches within one segment: no ** (nor a backslash or NUL)");
    }
  });
  return {
    root: { env: stringOrNull(r.env, `${path}.root.env`), default: nonEmpty(r.default, `${path}.root.default`) },
    paths,
    cwd_key: cwdKey,
    keyed_by: array(s.keyed_by, `${path}.keyed_by`).map((k, i) => oneOf(k, ["cwd", "session_id"], `${path}.keyed_by[${i}]`)),
    notes: string(s.notes, `${path}.notes`),
  };
}

const WHEN_KEYS = ["exit", "json", "error", "error_type", "error_code", "text", "unless_text"];
const JSON_OPERATORS = ["equals", "in", "contains", "present"] as const;

function exit(value: unknown, path: string): ExitCondition {
  if (Array.isArray(value)) {
    if (value.length === 0 || !value.every(isInteger)) throw new InvalidTable(path, "must be a non-empty list of integers");
    return value as number[];
  }
  return oneOf(value, ["zero", "nonzero", "none", "any"] as const, path);
}

function jsonCondition(value: unknown, path: string): JsonCondition {
  if (!isObject(value)) throw new InvalidTable(path, "must be an object");
  const operators = Object.keys(value).filter((k) => k !== "path");
  if (operators.length !== 1 || !(JSON_OPERATORS as readonly string[]).includes(operators[0]!)) {
    throw new InvalidTable(path, `must hold path and exactly one of ${JSON_OPERATORS.join(", ")}`);
  }
  const p = nonEmpty(value.path, `${path}.path`);
  if (p.split(".").some((key) => key === "")) throw new InvalidTable(`${path}.path`, "must be dot-separated keys");
  const op = operators[0] as (typeof JSON_OPERATORS)[number];
  const operand = value[op];
  if (op === "in") array(operand, `${path}.in`, 1);
  if (op === "contains") nonEmpty(operand, `${path}.contains`);
  if (op === "present" && operand !== true) throw new InvalidTable(`${path}.present`, "must be true");
  if (op === "equals" && operand === undefined) throw new InvalidTable(`${path}.equals`, "is missing");
  return { path: p, [op]: operand } as JsonCondition;
}

function when(value: unknown, path: string): When {
  const w = object(value, path, [], WHEN_KEYS);
  const out: When = {};
  if ("exit" in w) out.exit = exit(w.exit, `${path}.exit`);
  if ("json" in w) out.json = array(w.json, `${path}.json`, 1).map((c, i) => jsonCondition(c, `${path}.json[${i}]`));
  if ("error" in w) out.error = bool(w.error, `${path}.error`);
  if ("error_type" in w) out.error_type = strings(w.error_type, `${path}.error_type`, 1);
  if ("error_code" in w) {
    out.error_code = array(w.error_code, `${path}.error_code`, 1).map((c, i) => {
      if (typeof c === "string" ? c === "" : !isInteger(c)) throw new InvalidTable(`${path}.error_code[${i}]`, "must be a string or an integer");
      return c as string | number;
    });
  }
  if ("text" in w) out.text = strings(w.text, `${path}.text`, 1);
  if ("unless_text" in w) out.unless_text = strings(w.unless_text, `${path}.unless_text`, 1);
  return out;
}

function rule(value: unknown, path: string, harness: string): Rule {
  const r = object(value, path, ["id", "class", "when", "evidence", "note"]);
  const id = nonEmpty(r.id, `${path}.id`);
  if (!RULE_ID.test(id)) throw new InvalidTable(`${path}.id`, `must match ${RULE_ID.source}`);
  if (!id.startsWith(`${harness}.`)) throw new InvalidTable(`${path}.id`, `must start with ${harness}.`);
  return {
    id,
    class: r.class === null ? null : oneOf(r.class, HARNESS_CLASSES, `${path}.class`),
    when: when(r.when, `${path}.when`),
    evidence: strings(r.evidence, `${path}.evidence`, 1),
    note: string(r.note, `${path}.note`),
  };
}

/** The two rules every harness's rules end with, so that every outcome is decided. */
function checkTotal(rules: Rule[], path: string, harness: string): void {
  const last = rules[rules.length - 1];
  const failure = rules[rules.length - 2];
  const failureWhen = JSON.stringify(failure?.when);
  if (failure === undefined || failure.id !== `${harness}.failure` || failure.class !== "unclassified" || failureWhen !== '{"exit":"nonzero"}') {
    throw new InvalidTable(`${path}.rules`, `must end with ${harness}.failure: exit nonzero, class unclassified`);
  }
  if (last === undefined || last.class !== null || !(Object.keys(last.when).length === 0 || JSON.stringify(last.when) === '{"exit":"any"}')) {
    throw new InvalidTable(`${path}.rules`, "must end with a rule for any outcome, class null");
  }
}

function harness(value: unknown, path: string): HarnessSpec {
  const keys = ["name", "title", "kind", "package", "tested_versions", "invocation", "session_id", "capabilities", "sessions", "rules"];
  const h = object(value, path, keys);
  const name = nonEmpty(h.name, `${path}.name`);
  if (!NAME.test(name)) throw new InvalidTable(`${path}.name`, `must match ${NAME.source}`);
  const rules = array(h.rules, `${path}.rules`, 2).map((r, i) => rule(r, `${path}.rules[${i}]`, name));
  checkTotal(rules, path, name);
  return {
    name,
    title: nonEmpty(h.title, `${path}.title`),
    kind: oneOf(h.kind, HARNESS_KINDS, `${path}.kind`),
    package: stringOrNull(h.package, `${path}.package`),
    tested_versions: strings(h.tested_versions, `${path}.tested_versions`),
    invocation: nonEmpty(h.invocation, `${path}.invocation`),
    session_id: sessionIdPattern(h.session_id, `${path}.session_id`),
    capabilities: array(h.capabilities, `${path}.capabilities`).map((c, i) => capabilities(c, `${path}.capabilities[${i}]`)),
    sessions: sessions(h.sessions, `${path}.sessions`),
    rules,
  };
}

/** `raw` as a harness table, once it holds to the format (else `InvalidTable`, naming where). */
export function validateTable(raw: unknown): HarnessTable {
  const t = object(raw, "table", ["format", "version", "harnesses"]);
  if (t.format !== 1) throw new InvalidTable("table.format", "must be 1");
  const harnesses = array(t.harnesses, "table.harnesses", 1).map((h, i) => harness(h, `table.harnesses[${i}]`));
  const names = new Set<string>();
  const ids = new Set<string>();
  harnesses.forEach((h, i) => {
    if (names.has(h.name)) throw new InvalidTable(`table.harnesses[${i}].name`, `${h.name} is named twice`);
    names.add(h.name);
    h.rules.forEach((r, j) => {
      if (ids.has(r.id)) throw new InvalidTable(`table.harnesses[${i}].rules[${j}].id`, `${r.id} is used twice`);
      ids.add(r.id);
    });
  });
  return { format: 1, version: nonEmpty(t.version, "table.version"), harnesses };
}

/** Reads and checks a table file (JSON). */
export function loadTable(path: string | URL): HarnessTable {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new InvalidTable("table", `cannot be read as JSON (${(err as Error).message})`);
  }
  return validateTable(raw);
}

/** Where the build puts the shipped table: beside this module. */
export const SHIPPED_TABLE = new URL("./harnesses.json", import.meta.url);

let shipped: HarnessTable | null = null;

/** The table shipped in this package, read and checked once. */
export function shippedTable(): HarnessTable {
  shipped ??= loadTable(SHIPPED_TABLE);
  return shipped;
}
