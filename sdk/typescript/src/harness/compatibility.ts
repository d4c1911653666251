/**
 * The compatibility generation from named components (contract 3.2, 3.3 and 9.11), as the Python
 * SDK computes it (continuity_runner/harness/compatibility.py); sdk/compatibility-vectors.json
 * holds inputs and the digests both must compute.
 *
 * ```ts
 * const components = new harness.Components({
 *   executable: harness.executable("claude-code", "2.1.332"), // "claude-code@2.1"
 *   protocol: "stream-json",
 *   model_route: "anthropic/claude-sonnet-4",
 *   reasoning_effort: "high",
 *   mcp_servers: ["github", "linear"],
 *   permission_mode: "acceptEdits",
 *   cwd: "/work/acme/",
 * });
 * components.generation; // 64 lowercase hex digits
 * components.digests();  // { cwd: "...", executable: "...", ... }
 * ```
 *
 * - Each component present is canonicalised, then written as canonical JSON: a string component
 *   as a JSON string, a set component (`plugins`, `mcp_servers`) as a JSON array of its distinct
 *   strings sorted by code point (the order given never matters), `cwd` as a JSON string of the
 *   canonical path. JSON strings escape only `"`, `\` and U+0000 to U+001F; arrays have no
 *   spaces. Strings are not Unicode-normalised; a lone surrogate is refused.
 * - A component's digest is the lowercase hex SHA-256 of its canonical JSON's UTF-8 bytes.
 * - The generation is the lowercase hex SHA-256 of the lines `<name>=<digest>`, one per component
 *   present, sorted by name, joined by `\n` (no final line break).
 * - A missing component (undefined or null) is not in the generation; an empty one (`""`, an
 *   empty set) is, with the digest of `""` or `[]`: the two are different generations.
 * - `cwd` must be absolute. Its canonical form joins the segments with single slashes, drops `.`
 *   segments and a trailing slash, and keeps `..` segments: the disk is never read.
 *
 * A value of the wrong type throws `TypeError`; any other refused value `RangeError`.
 */

import { createHash } from "node:crypto";
import type { ComponentDigests, HasComponentDigests } from "../contract.js";
import { InvalidRequest } from "../errors.js";

/** The closed component names, in the order of the generation's lines. */
export const COMPONENT_NAMES = [
  "composition",
  "cwd",
  "executable",
  "mcp_servers",
  "model_route",
  "permission_mode",
  "plugins",
  "protocol",
  "reasoning_effort",
] as const;
export type ComponentName = (typeof COMPONENT_NAMES)[number];

/** Components whose value is a set of strings: order and repetition do not matter. */
export const SET_COMPONENTS: ReadonlySet<ComponentName> = new Set(["mcp_servers", "plugins"]);
/** Components whose value is an absolute path, canonicalised without touching the disk. */
export const PATH_COMPONENTS: ReadonlySet<ComponentName> = new Set(["cwd"]);

const DIGEST = /^[0-9a-f]{64}$/;
/** `MAJOR.MINOR[.PATCH]` and a suffix; `[^\n]` as Python's `.` (which does cross `\r`). */
const VERSION = /^([0-9]+)\.([0-9]+)(?:\.[0-9]+)?(?:[-+][^\n]*)?$/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** The values of the components of one harness process; undefined or null: missing. */
export interface ComponentValues {
  /** The composition's generation: the adapter's own layering (system prompt, tools, agents). */
  composition?: string | null;
  /** The working directory, absolute (canonicalised, symbolic links not resolved). */
  cwd?: string | null;
  /** The harness and its tested family (`claude-code@2.1`, see `executable`). */
  executable?: string | null;
  /** The set of MCP servers the session was started with (order does not matter). */
  mcp_servers?: Iterable<string> | null;
  /** The model and the route to it (`anthropic/claude-sonnet-4`, a gateway's route name). */
  model_route?: string | null;
  permission_mode?: string | null;
  /** The set of plugins and their generations (`name@version` strings, say). */
  plugins?: Iterable<string> | null;
  /** The wire protocol and its generation between the runner and the harness. */
  protocol?: string | null;
  reasoning_effort?: string | null;
}

/** A canonical value: a string, or for a set component its distinct strings in code point order. */
export type CanonicalValue = string | readonly string[];

function isComponentName(name: string): name is ComponentName {
  return (COMPONENT_NAMES as readonly string[]).includes(name);
}

function checkText(value: unknown, name: string): string {
  if (typeof value !== "string") throw new TypeError(`${name} must be a string`);
  if (LONE_SURROGATE.test(value)) throw new RangeError(`${name} is not Unicode text (a lone surrogate)`);
  return value;
}

/** Orders strings by code point (JavaScript's own order is by UTF-16 unit, which differs above
 * U+FFFF from U+E000 to U+FFFF). */
export function compareCodePoints(a: string, b: string): number {
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done === true || y.done === true) return x.done === true ? (y.done === true ? 0 : -1) : 1;
    const d = x.value.codePointAt(0)! - y.value.codePointAt(0)!;
    if (d !== 0) return d;
  }
}

/**
 * The `executable` component of a harness at a version: its name and tested family,
 * `MAJOR.MINOR` (`executable("claude-code", "2.1.332")` is `claude-code@2.1`); a pre-release or
 * build suffix is ignored, as version ranges ignore it.
 */
export function executable(harness: string, version: string): string {
  const found = typeof version === "string" ? VERSION.exec(version) : null;
  if (typeof harness !== "string" || harness === "" || found === null) {
    throw new RangeError("executable needs a harness name and a MAJOR.MINOR[.PATCH] version");
  }
  return `${harness}@${BigInt(found[1]!)}.${BigInt(found[2]!)}`;
}

/** An absolute POSIX path with single slashes, no `.` segment and no trailing slash; `..`
 * segments are kept. */
export function canonicalPath(path: string): string {
  checkText(path, "cwd");
  if (!path.startsWith("/")) throw new RangeError("cwd must be an absolute path");
  if (path.includes("\0")) throw new RangeError("cwd must not contain NUL");
  return "/" + path.split("/").filter((segment) => segment !== "" && segment !== ".").join("/");
}

/** `value` of component `name` canonicalised. */
export function canonicalValue(name: string, value: unknown): CanonicalValue {
  if (!isComponentName(name)) throw new RangeError(`unknown compatibility component ${JSON.stringify(name)}`);
  if (SET_COMPONENTS.has(name)) {
    if (typeof value === "string" || value === null || typeof value !== "object" || !(Symbol.iterator in value)) {
      throw new TypeError(`${name} must be a collection of strings`);
    }
    const items = [...(value as Iterable<unknown>)].map((item) => checkText(item, name));
    return [...new Set(items)].sort(compareCodePoints);
  }
  const text = checkText(value, name);
  return PATH_COMPONENTS.has(name) ? canonicalPath(text) : text;
}

/** A JSON string as Python's `json.dumps(ensure_ascii=False)` writes it: for text without a lone
 * surrogate, `JSON.stringify`'s. */
function jsonString(value: string): string {
  return JSON.stringify(value);
}

/** The canonical JSON text of component `name`'s value. */
export function canonicalJson(name: string, value: unknown): string {
  const canonical = canonicalValue(name, value);
  return typeof canonical === "string" ? jsonString(canonical) : `[${canonical.map(jsonString).join(",")}]`;
}

function sha256(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/** The lowercase hex SHA-256 of the canonical JSON of the value. */
export function componentDigest(name: string, value: unknown): string {
  return sha256(canonicalJson(name, value));
}

/** The generation of components given by their digests: the SHA-256 of the sorted
 * `name=digest` lines joined by `\n`. */
export function generationOf(digests: Readonly<Record<string, string>>): string {
  const names = Object.keys(digests);
  if (names.length === 0) throw new RangeError("a generation needs at least one component");
  for (const name of names) {
    if (!isComponentName(name)) throw new RangeError(`unknown compatibility component ${JSON.stringify(name)}`);
    const digest = digests[name];
    if (typeof digest !== "string" || !DIGEST.test(digest)) throw new RangeError(`the digest of ${name} is not 64 lowercase hex digits`);
  }
  return sha256(names.sort().map((name) => `${name}=${digests[name]}`).join("\n"));
}

/** The names of the components whose digests differ, or that one side has and the other lacks,
 * sorted. */
export function changedComponents(saved: Readonly<Record<string, string>>, ready: Readonly<Record<string, string>>): string[] {
  const names = new Set([...Object.keys(saved), ...Object.keys(ready)]);
  return [...names].filter((name) => saved[name] !== ready[name]).sort();
}

/** The components of one harness process, canonicalised when made (a wrong type or a relative
 * `cwd` throws). */
export class Components {
  private readonly values: Partial<Record<ComponentName, CanonicalValue>> = {};

  constructor(values: ComponentValues = {}) {
    if (typeof values !== "object" || values === null) throw new TypeError("components are an object of values by name");
    const unknown = Object.keys(values).filter((name) => !isComponentName(name)).sort();
    if (unknown.length > 0) throw new RangeError(`unknown compatibility components ${unknown.join(", ")}`);
    for (const name of COMPONENT_NAMES) {
      const value: unknown = values[name];
      if (value !== undefined && value !== null) this.values[name] = canonicalValue(name, value);
    }
  }

  /** The canonical value of `name`, or undefined when it is missing. */
  get(name: ComponentName): CanonicalValue | undefined {
    return this.values[name];
  }

  /** The components present, sorted. */
  names(): ComponentName[] {
    return COMPONENT_NAMES.filter((name) => this.values[name] !== undefined);
  }

  /** `{name: canonical JSON}` of the components present. */
  canonical(): Record<string, string> {
    return Object.fromEntries(this.names().map((name) => [name, canonicalJson(name, this.values[name])]));
  }

  /** `{name: digest}` of the components present, sorted by name: what a commit and a decide carry
   * (`compatibilityComponents`, `readyComponents`). */
  digests(): ComponentDigests {
    return Object.fromEntries(Object.entries(this.canonical()).map(([name, text]) => [name, sha256(text)]));
  }

  /** The compatibility generation of these components (64 lowercase hex digits). */
  get generation(): string {
    return generationOf(this.digests());
  }

  /** The names of the components that differ from `saved`'s, sorted. */
  changedFrom(saved: Components): string[] {
    return changedComponents(saved.digests(), this.digests());
  }
}

/**
 * What a commit or a decide carries of `components` (a `Components`, or `{name: digest}`; null or
 * undefined: none) and the generation sent with them: the generation they make when none is
 * given. `InvalidRequest` (`invalid_field`), naming the field, for digests outside the contract or
 * a generation they do not make, as the session-store refuses both.
 */
export function onTheWire(
  components: ComponentDigests | HasComponentDigests | null | undefined,
  generation: string | null | undefined,
  field: string,
  generationField: string,
): { digests: ComponentDigests | null | undefined; generation: string | null | undefined } {
  if (components === null || components === undefined) return { digests: components, generation };
  const given: unknown = typeof (components as HasComponentDigests).digests === "function"
    ? (components as HasComponentDigests).digests()
    : components;
  if (typeof given !== "object" || given === null || Array.isArray(given)) {
    throw new InvalidRequest(400, "invalid_field", `${field}: expected an object`, field);
  }
  const digests = { ...(given as Record<string, unknown>) };
  const names = Object.keys(digests);
  if (names.length === 0) throw new InvalidRequest(400, "invalid_field", `${field}: expected at least 1 entries`, field);
  for (const name of names) {
    if (!isComponentName(name)) {
      throw new InvalidRequest(400, "invalid_field", `${field}.${name}: is not one of the contract's names`, `${field}.${name}`);
    }
    const digest = digests[name];
    if (typeof digest !== "string" || !DIGEST.test(digest)) {
      throw new InvalidRequest(400, "invalid_field", `${field}.${name}: expected 64 lowercase hex digits`, `${field}.${name}`);
    }
  }
  const made = generationOf(digests as Record<string, string>);
  if (generation !== null && generation !== undefined && generation !== made) {
    throw new InvalidRequest(400, "invalid_field", `${field} are not the components of ${generationField}`, field);
  }
  return { digests: digests as ComponentDigests, generation: made };
}
