/**
 * The matcher: an outcome of a failed (or not failed) resume, as the harness left it, against a
 * harness's ordered rules. The Python SDK implements the same semantics; both play the shared
 * corpus (sdk/harness-corpus.json) in their tests.
 */

import { InvalidRequest } from "../errors.js";
import type { HarnessClass, JsonCondition, Rule, When } from "./table.js";

/** What the harness left: its exit code (null: none, e.g. an SDK harness), its output, and for an
 * SDK harness the exception's class name and the API's error code. */
export interface Outcome {
  exit_code: number | null;
  /** Default "". */
  stdout?: string;
  /** Default "". */
  stderr?: string;
  /** Default null. */
  error?: OutcomeError | null;
}

/** An outcome once checked: every field present. */
export interface CheckedOutcome {
  exit_code: number | null;
  stdout: string;
  stderr: string;
  error: OutcomeError | null;
}

export interface OutcomeError {
  /** Default null. */
  type?: string | null;
  /** Default null. */
  code?: string | number | null;
}

/** The first rule that held: its class (null: not a failure) and its id. */
export interface Assessment {
  failure_class: HarnessClass | null;
  rule: string;
}

/** Outcomes larger than this in all (UTF-8 bytes of stdout, stderr and the error) are refused. */
export const MAX_OUTCOME_BYTES = 4 * 1024 * 1024;
/** At most this much of stdout is read for JSON documents... */
export const MAX_DOCUMENT_BYTES = 1024 * 1024;
/** ...and at most this many of its lines. */
export const MAX_DOCUMENT_LINES = 1000;

const ANSI_CSI = /\x1b\[[0-9;?]*[ -/]*[@-~]/g;
const ANSI_OSC = /\x1b\][^\x07]*\x07/g;

/** `text` without ANSI escape sequences (CSI, and OSC ended by BEL). */
export function stripAnsi(text: string): string {
  return text.replace(ANSI_CSI, "").replace(ANSI_OSC, "");
}

/** An outcome, prepared once for all the rules. */
export interface Prepared {
  outcome: CheckedOutcome;
  /** stderr + "\n" + stdout, without ANSI escape sequences. */
  text: string;
  /** The JSON objects stdout holds: all of it as one, else each line that is one, in order. */
  documents: Record<string, unknown>[];
}

type Json = unknown;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function parseObject(text: string): Record<string, unknown> | null {
  try {
    const value: Json = JSON.parse(text);
    return isObject(value) ? value : null;
  } catch {
    return null;
  }
}

const encoder = new TextEncoder();

/** The first `limit` bytes of `text` as UTF-8, never cutting a character. */
function headBytes(text: string, limit: number): string {
  if (text.length <= limit / 3) return text; // at most 3 bytes per UTF-16 unit
  const bytes = encoder.encode(text);
  if (bytes.length <= limit) return text;
  let end = limit;
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--; // back to a character's first byte
  return new TextDecoder().decode(bytes.subarray(0, end));
}

/** The characters Python's `str.strip()` removes (`str.isspace`): JavaScript's `trim()` removes
 * U+FEFF too and keeps U+001C to U+001F and U+0085, so a line would read differently. */
const PY_SPACE = "\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
const PY_STRIP = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, "g");

/** `text` without leading and trailing whitespace, as Python's `str.strip()` removes it. */
export function pyStrip(text: string): string {
  return text.replace(PY_STRIP, "");
}

function documentsOf(stdout: string): Record<string, unknown>[] {
  const head = stripAnsi(headBytes(stdout, MAX_DOCUMENT_BYTES));
  const whole = parseObject(pyStrip(head));
  if (whole !== null) return [whole];
  const documents: Record<string, unknown>[] = [];
  for (const line of head.split("\n").slice(0, MAX_DOCUMENT_LINES)) {
    const trimmed = pyStrip(line);
    if (!trimmed.startsWith("{")) continue;
    const document = parseObject(trimmed);
    if (document !== null) documents.push(document);
  }
  return documents;
}

function isInteger(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value);
}

/**
 * `raw` as an outcome, or `InvalidRequest` naming the field (`exit_code`, `error.code`; a field
 * an outcome does not have: `outcome`, or `error` within the error, as the Python SDK names them).
 * `stdout` and `stderr` default to `""`, `error` to null.
 */
export function checkOutcome(raw: unknown): CheckedOutcome {
  if (!isObject(raw)) throw new InvalidRequest(400, "invalid_field", "an outcome is an object of its fields", "outcome");
  for (const key of Object.keys(raw)) {
    if (!["exit_code", "stdout", "stderr", "error"].includes(key)) {
      throw new InvalidRequest(400, "invalid_field", `${JSON.stringify(key)} is not a field of an outcome`, "outcome");
    }
  }
  if (!("exit_code" in raw)) throw new InvalidRequest(400, "invalid_field", "an outcome needs exit_code (null for none)", "outcome");
  const { exit_code: exitCode, stdout = "", stderr = "", error = null } = raw;
  if (exitCode !== null && !isInteger(exitCode)) {
    throw new InvalidRequest(400, "invalid_field", "exit_code must be an integer (2^53 - 1 at most) or null", "exit_code");
  }
  if (typeof stdout !== "string") throw new InvalidRequest(400, "invalid_field", "stdout must be a string", "stdout");
  if (typeof stderr !== "string") throw new InvalidRequest(400, "invalid_field", "stderr must be a string", "stderr");
  let checkedError: OutcomeError | null = null;
  if (error !== null) {
    if (!isObject(error)) throw new InvalidRequest(400, "invalid_field", "error must be an object or null", "error");
    for (const key of Object.keys(error)) {
      if (key !== "type" && key !== "code") {
        throw new InvalidRequest(400, "invalid_field", `${JSON.stringify(key)} is not a field of error`, "error");
      }
    }
    const type = error.type ?? null;
    const code = error.code ?? null;
    if (type !== null && typeof type !== "string") throw new InvalidRequest(400, "invalid_field", "error.type must be a string or null", "error.type");
    if (code !== null && typeof code !== "string" && !isInteger(code)) {
      throw new InvalidRequest(400, "invalid_field", "error.code must be a string, an integer or null", "error.code");
    }
    checkedError = { type, code };
  }
  const size =
    encoder.encode(stdout).length +
    encoder.encode(stderr).length +
    (checkedError === null ? 0 : encoder.encode(JSON.stringify(checkedError)).length);
  if (size > MAX_OUTCOME_BYTES) {
    const why = `the outcome is ${size} bytes: more than ${MAX_OUTCOME_BYTES} are refused`;
    throw new InvalidRequest(400, "payload_too_large", why, "outcome");
  }
  return { exit_code: exitCode as number | null, stdout, stderr, error: checkedError };
}

/** Checks `outcome` and prepares what the rules read from it. */
export function prepare(outcome: unknown): Prepared {
  const checked = checkOutcome(outcome);
  return {
    outcome: checked,
    text: stripAnsi(`${checked.stderr}\n${checked.stdout}`),
    documents: documentsOf(checked.stdout),
  };
}

/** JSON equality without coercion: 1 is not "1", true is not 1, key order does not matter. */
export function jsonEqual(a: Json, b: Json): boolean {
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") {
    return typeof a === typeof b && a === b;
  }
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  }
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  const bo = b as Record<string, Json>;
  return ka.every((k) => Object.hasOwn(bo, k) && jsonEqual((a as Record<string, Json>)[k], bo[k]));
}

/** The value at `path` (dot-separated object keys), or `missing`. */
const missing = Symbol("missing");
function resolve(document: Record<string, unknown>, path: string): Json | typeof missing {
  let value: Json = document;
  for (const key of path.split(".")) {
    if (!isObject(value) || !Object.hasOwn(value, key)) return missing;
    value = value[key];
  }
  return value;
}

function holds(item: JsonCondition, document: Record<string, unknown>): boolean {
  const value = resolve(document, item.path);
  if (value === missing) return false;
  if ("equals" in item) return jsonEqual(value, item.equals);
  if ("in" in item) return (item.in ?? []).some((candidate) => jsonEqual(value, candidate));
  if ("contains" in item) return typeof value === "string" && value.includes(item.contains ?? "");
  return item.present === true;
}

function exitHolds(exit: When["exit"], code: number | null): boolean {
  if (exit === undefined || exit === "any") return true;
  if (exit === "zero") return code === 0;
  if (exit === "nonzero") return code !== null && code !== 0;
  if (exit === "none") return code === null;
  return code !== null && exit.includes(code);
}

/** Whether every condition of `when` holds for the prepared outcome. */
export function whenHolds(when: When, prepared: Prepared): boolean {
  const { outcome, text, documents } = prepared;
  if (!exitHolds(when.exit, outcome.exit_code)) return false;
  if (when.json !== undefined) {
    const items = when.json;
    if (!documents.some((document) => items.every((item) => holds(item, document)))) return false;
  }
  const error = outcome.error;
  if (when.error !== undefined && when.error !== (error !== null)) return false;
  if (when.error_type !== undefined && (error === null || !when.error_type.some((t) => jsonEqual(error.type, t)))) return false;
  if (when.error_code !== undefined && (error === null || !when.error_code.some((c) => jsonEqual(error.code, c)))) return false;
  if (when.text !== undefined && !when.text.some((s) => text.includes(s))) return false;
  if (when.unless_text !== undefined && when.unless_text.some((s) => text.includes(s))) return false;
  return true;
}

/** The first of `rules` whose conditions hold for `outcome` decides. */
export function assessWith(rules: readonly Rule[], outcome: unknown): Assessment {
  const prepared = prepare(outcome);
  for (const rule of rules) {
    if (whenHolds(rule.when, prepared)) return { failure_class: rule.class, rule: rule.id };
  }
  // A checked table ends with a rule for any outcome: this is only reached with unchecked rules.
  throw new Error("no rule decided the outcome: the rules do not end with a rule for any outcome");
}
