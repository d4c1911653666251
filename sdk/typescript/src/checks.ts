/**
 * What a runner sends is checked before it is sent, as the services check it (contract 1 and
 * 9.8), so that nothing is dead-lettered or refused in silence: the services only decode what
 * they receive, and a bad event gets no reply at all.
 *
 * A message is first reduced to the contract's fields (defaults filled in), then its strings are
 * checked to be Unicode text, its encoded size against its byte limit (before anything else, as
 * the services measure the bytes before they parse any), then every field in the contract's order:
 * patterns, closed sets, real UTC times, integer bounds and character limits (in Unicode code
 * points, as Python counts them: not UTF-16 units). A refusal is an `InvalidRequest` naming the
 * field by its contract path (`error.code`, `session.tenant`), never its value. The Python SDK
 * makes the same checks (continuity_runner/checks.py); sdk/bad-inputs.json is played by both.
 */

import {
  HARNESS_NAME_PATTERN,
  HARNESS_VERSION_PATTERN,
  RUNNER_ID_PATTERN,
  TIME_PATTERN,
  TOKEN_PATTERN,
  type ArchiveResult,
} from "./contract.js";
import { InvalidRequest } from "./errors.js";

/** Contract 9.8. */
export const LIMITS = {
  eventBytes: 65536,
  requestBytes: 65536,
  attempt: 1000,
  safeInteger: Number.MAX_SAFE_INTEGER,
  nameChars: 256,
  signatureChars: 128,
  commandChars: 1024,
  cursorChars: 1024,
  messageChars: 4096,
  pathChars: 4096,
  outputChars: 8192,
} as const;

/** What one value must be. */
export type Rule =
  | { kind: "string"; max?: number; pattern?: RegExp }
  | { kind: "time" }
  | { kind: "int"; min: number; max: number }
  | { kind: "bool" }
  | { kind: "enum"; values: readonly string[] }
  | { kind: "object"; fields: Record<string, Field> }
  | { kind: "map"; keys: readonly string[]; value: Rule; min: number };

/** A field of an object: optional when it has a default (`"fallback" in field`). */
export interface Field {
  rule: Rule;
  nullable: boolean;
  fallback?: unknown;
}

const required = (rule: Rule): Field => ({ rule, nullable: false });
/** Optional: absent means `fallback`; null is allowed when the fallback is null. */
const optional = (rule: Rule, fallback: unknown): Field => ({ rule, nullable: fallback === null, fallback });
const chars = (max: number): Rule => ({ kind: "string", max });
const oneOf = (...values: string[]): Rule => ({ kind: "enum", values });
const object = (fields: Record<string, Field>): Rule => ({ kind: "object", fields });

export const TOKEN: Rule = { kind: "string", pattern: TOKEN_PATTERN };
const RUNNER_ID: Rule = { kind: "string", pattern: RUNNER_ID_PATTERN };
const TIME: Rule = { kind: "time" };
const BOOL: Rule = { kind: "bool" };
const NAME = chars(LIMITS.nameChars);
const COUNT: Rule = { kind: "int", min: 0, max: LIMITS.safeInteger };
export const ATTEMPT: Rule = { kind: "int", min: 1, max: LIMITS.attempt };

/** `{name: digest}` of compatibility components (contract 3.2, 3.3): 1 to 9 closed names. */
const COMPONENTS: Rule = {
  kind: "map",
  keys: [
    "composition",
    "cwd",
    "executable",
    "mcp_servers",
    "model_route",
    "permission_mode",
    "plugins",
    "protocol",
    "reasoning_effort",
  ],
  value: { kind: "string", pattern: /^[0-9a-f]{64}$/ },
  min: 1,
};

const SESSION = object({ tenant: required(TOKEN), conversation_id: required(TOKEN), agent_id: required(TOKEN) });

// The messages, field for field in the order of the contract's Structs (shared/contract).
export const DECIDE_REQUEST = object({
  session: required(SESSION),
  adapter: required(NAME),
  model: required(NAME),
  cwd: required(chars(LIMITS.pathChars)),
  latest_cursor: optional(chars(LIMITS.cursorChars), null),
  compatibility: optional(oneOf("none", "profile-ready"), "none"),
  ready_generation: optional(TOKEN, null),
  ready_components: optional(COMPONENTS, null),
});

export const COMMIT_REQUEST = object({
  session: required(SESSION),
  native_session_id: required(TOKEN),
  adapter: required(NAME),
  model: required(NAME),
  cwd: required(chars(LIMITS.pathChars)),
  checkpoint_policy: required(
    oneOf("same_session_only", "allow_replacement_after_governed_wait", "allow_replacement_after_resume_failure"),
  ),
  cursor: optional(chars(LIMITS.cursorChars), null),
  prompt_hash: optional(NAME, null),
  compatibility_generation: optional(TOKEN, null),
  expected_revision: optional(COUNT, null),
  epoch: optional(COUNT, null),
  cancelled: optional(BOOL, false),
  compatibility_components: optional(COMPONENTS, null),
});

export const REJECT_REQUEST = object({
  session: required(SESSION),
  native_session_id: required(TOKEN),
  code: required(oneOf("resume_target_missing", "resume_target_corrupt")),
});

export const GET_REQUEST = object({ session: required(SESSION) });

export const CLAIM_REQUEST = object({ session: required(SESSION) });

export const COMMAND_RESULT = object({
  command: required(chars(LIMITS.commandChars)),
  status: required(NAME),
  classification: optional(NAME, null),
  issued_at: required(TIME),
  key_id: required(TOKEN),
  signature: required(chars(LIMITS.signatureChars)),
});

/** `{name, version}` of the harness (4.6). */
export const HARNESS_NAME: Rule = { kind: "string", pattern: HARNESS_NAME_PATTERN };
export const HARNESS_VERSION: Rule = { kind: "string", pattern: HARNESS_VERSION_PATTERN };
const HARNESS_INFO = object({ name: required(HARNESS_NAME), version: optional(HARNESS_VERSION, null) });

export const RESUME_FAILED = object({
  type: required(oneOf("resume_failed")),
  event_id: required(TOKEN),
  runner_id: required(RUNNER_ID),
  run_id: required(TOKEN),
  attempt: required(ATTEMPT),
  session: required(SESSION),
  native_session_id: required(TOKEN),
  occurred_at: required(TIME),
  error: optional(object({ type: required(NAME), code: required(NAME), message: optional(chars(LIMITS.messageChars), "") }), null),
  command_result: optional(COMMAND_RESULT, null),
  pending_tool_call: optional(
    object({
      tool_call_id: required(TOKEN),
      tool_name: required(NAME),
      started_at: required(TIME),
      recorded_outcome: optional(oneOf("completed", "not_performed"), null),
    }),
    null,
  ),
  governed_wait_elapsed: optional(BOOL, false),
  harness: optional(HARNESS_INFO, null),
});

export const TURN_COMPLETED = object({
  type: required(oneOf("turn_completed")),
  event_id: required(TOKEN),
  runner_id: required(RUNNER_ID),
  run_id: required(TOKEN),
  attempt: required(ATTEMPT),
  session: required(SESSION),
  native_session_id: required(TOKEN),
  occurred_at: required(TIME),
  result: required(COMMAND_RESULT),
  harness: optional(HARNESS_INFO, null),
});

const ARCHIVE_RESULT = object({
  exit_code: { rule: { kind: "int", min: -LIMITS.safeInteger, max: LIMITS.safeInteger }, nullable: true },
  timed_out: optional(BOOL, false),
  output: optional(chars(LIMITS.outputChars), ""),
});

const encoder = new TextEncoder();

/**
 * `raw` as the JSON bytes of the message `rule` describes, once it holds to the contract: every
 * string Unicode text, at most `limit` bytes (`payload_too_large`), every field valid
 * (`invalid_field`, `missing_field`). `prefix` is the message's path in what is sent.
 */
export function encodeChecked(rule: Rule, raw: unknown, limit: number, prefix = ""): Uint8Array {
  const message = reduce(rule, raw);
  checkText(message, prefix);
  let json: string;
  try {
    json = JSON.stringify(message);
  } catch {
    throw new InvalidRequest(400, "invalid_field", "a value of the message cannot be encoded as JSON");
  }
  const data = encoder.encode(json);
  if (data.length > limit) {
    throw new InvalidRequest(400, "payload_too_large", `the message is larger than ${limit} bytes`);
  }
  check(required(rule), message, prefix);
  return data;
}

/** The message `raw` reduced to the contract's fields, with the defaults of absent ones. */
function reduce(rule: Rule, raw: unknown): unknown {
  if (rule.kind !== "object" || !isRecord(raw)) return raw;
  const out: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(rule.fields)) {
    const value = raw[name];
    if (value !== undefined) out[name] = reduce(field.rule, value);
    else if ("fallback" in field) out[name] = field.fallback;
  }
  return out;
}

// A lone surrogate: JSON.stringify escapes it, and the services refuse that escape as malformed.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function checkText(value: unknown, path: string): void {
  if (typeof value === "string") {
    if (LONE_SURROGATE.test(value)) {
      throw refused(path, "is not Unicode text (a lone surrogate)");
    }
  } else if (isRecord(value)) {
    for (const [name, item] of Object.entries(value)) checkText(item, join(path, name));
  }
}

/** Checks one value against its field; throws the first refusal. */
export function check(field: Field, value: unknown, path: string): void {
  if (value === undefined) {
    throw new InvalidRequest(400, "missing_field", `${path || "the message"} is missing`, path || null);
  }
  if (value === null) {
    if (field.nullable) return;
    throw refused(path, "expected a value, got null");
  }
  const rule = field.rule;
  switch (rule.kind) {
    case "string":
      if (typeof value !== "string") throw refused(path, "expected a string");
      if (rule.max !== undefined && codePoints(value, rule.max) > rule.max) {
        throw refused(path, `expected a string of at most ${rule.max} characters`);
      }
      if (rule.pattern !== undefined && !rule.pattern.test(value)) {
        throw refused(path, `expected a string matching ${rule.pattern.source}`);
      }
      return;
    case "time":
      checkTime(value, path);
      return;
    case "int":
      if (typeof value !== "number" || !Number.isInteger(value) || value < rule.min || value > rule.max) {
        throw refused(path, `expected an integer from ${rule.min} to ${rule.max}`);
      }
      return;
    case "bool":
      if (typeof value !== "boolean") throw refused(path, "expected true or false");
      return;
    case "enum":
      if (typeof value !== "string" || !rule.values.includes(value)) {
        throw refused(path, "is not one of the contract's values");
      }
      return;
    case "object":
      if (!isRecord(value)) throw refused(path, "expected an object");
      for (const [name, member] of Object.entries(rule.fields)) check(member, value[name], join(path, name));
      return;
    case "map": {
      if (!isRecord(value)) throw refused(path, "expected an object");
      const names = Object.keys(value);
      if (names.length < rule.min) throw refused(path, `expected at least ${rule.min} entries`);
      for (const name of names) {
        if (!rule.keys.includes(name)) throw refused(join(path, name), "is not one of the contract's names");
        check(required(rule.value), value[name], join(path, name));
      }
      return;
    }
  }
}

/** Checks `value` against one rule (an argument that is not part of a message: `attempt`). */
export function checkValue(rule: Rule, value: unknown, path: string): void {
  check(required(rule), value, path);
}

const DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** A real UTC instant (contract 9.8): the pattern, then a day that exists in its month. */
function checkTime(value: unknown, path: string): void {
  if (typeof value !== "string" || !TIME_PATTERN.test(value)) {
    throw refused(path, "must be an RFC 3339 UTC time (Z or +00:00)");
  }
  const year = Number(value.slice(0, 4));
  const month = Number(value.slice(5, 7));
  const day = Number(value.slice(8, 10));
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const last = month === 2 && leap ? 29 : DAYS[month - 1]!;
  if (day > last) throw refused(path, "is not a calendar date");
}

/** The code points of `s`, counted only as far as needed to know whether it exceeds `max`. */
function codePoints(s: string, max: number): number {
  if (s.length <= max) return s.length; // never more code points than UTF-16 units
  let n = 0;
  for (const _ of s) if (++n > max) break;
  return n;
}

/** `s` cut to its first `max` code points (a surrogate pair is never split). */
function cut(s: string, max: number): string {
  if (s.length <= max) return s;
  let end = 0;
  let n = 0;
  for (const c of s) {
    if (n++ === max) break;
    end += c.length;
  }
  return s.slice(0, end);
}

/**
 * The answer sent for an archive handler's result, as the Python SDK sends it: the output cut to
 * the contract's 8192 characters; a result that still breaks the contract (an exit code out of
 * range, an output that is not text) answered as a failed move.
 */
export function archiveAnswer(result: unknown): ArchiveResult {
  let answer = reduce(ARCHIVE_RESULT, result);
  if (isRecord(answer) && typeof answer.output === "string") {
    answer = { ...answer, output: cut(answer.output, LIMITS.outputChars) };
  }
  try {
    encodeChecked(ARCHIVE_RESULT, answer, LIMITS.requestBytes);
    return answer as ArchiveResult;
  } catch {
    return { exit_code: 1, timed_out: false, output: "the handler's result breaks the contract" };
  }
}

function refused(path: string, why: string): InvalidRequest {
  return new InvalidRequest(400, "invalid_field", `${path || "the message"}: ${why}`, path || null);
}

function join(path: string, name: string): string {
  return path ? `${path}.${name}` : name;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
