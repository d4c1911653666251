/**
 * The presence probe: whether a harness's session is on this host, from the table's `sessions`
 * (where the harness keeps its files). It only asks the file system whether a regular file exists
 * (`stat`) and lists the folders a `*` reads (`readdir`); it never opens a file. A session id that
 * does not match the harness's pattern is `absent` at once: it never becomes part of a path.
 */

import { readdir, stat } from "node:fs/promises";
import type { CwdKey, SessionsSpec } from "./table.js";

/** `present`: a file of the session is there; `absent`: none is; `unknown`: the harness keeps no
 * files the probe can read (an SDK harness, a root the probe may not read). */
export type Presence = "present" | "absent" | "unknown";

/** The environment the harness runs with: its root variable (CLAUDE_CONFIG_DIR...) and HOME. */
export type Env = Readonly<Record<string, string | undefined>>;

export interface ProbeOptions {
  /** The working directory the session was saved in (harnesses that key sessions by it). */
  cwd?: string;
  /** The environment the harness runs with (its root variable and HOME); default process.env. */
  env?: Env;
}

/** Claude Code's project folder names are cut to this many characters, then hashed. */
export const CLAUDE_KEY_CHARS = 200;
const PLAIN_DIR_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const RESERVED = /^(?:con|prn|aux|nul|com[0-9]|lpt[0-9])$/i;

/** Claude Code's hash of a path: the 32-bit `h = h * 31 + unit` over its UTF-16 units, its
 * absolute value in base 36. */
function claudeHash(text: string): string {
  let h = 0;
  for (let i = 0; i < text.length; i++) h = (Math.imul(h, 31) + text.charCodeAt(i)) | 0;
  return Math.abs(h).toString(36);
}

/**
 * Claude Code's project folder name of `cwd` (seen with 2.1.332): every UTF-16 unit other than
 * A-Z a-z 0-9 becomes `-`; a name longer than 200 characters is cut to 200 and followed by `-`
 * and the path's hash. With CLAUDE_CONFIG_DIR set, a plain CLAUDE_CODE_PROJECT_DIR_NAME (1 to 64
 * of A-Z a-z 0-9 _ -, not a reserved device name) is the name instead.
 */
export function claudeKey(cwd: string, env: Env = {}): string {
  const override = env.CLAUDE_CODE_PROJECT_DIR_NAME;
  if (env.CLAUDE_CONFIG_DIR && override && PLAIN_DIR_NAME.test(override) && !RESERVED.test(override)) return override;
  const name = cwd.replace(/[^A-Za-z0-9]/g, "-"); // per UTF-16 unit: a pair becomes two
  return name.length <= CLAUDE_KEY_CHARS ? name : `${name.slice(0, CLAUDE_KEY_CHARS)}-${claudeHash(cwd)}`;
}

/** The folder name of the working directory `cwd` under the scheme `scheme`. */
export function cwdKey(scheme: CwdKey, cwd: string, env: Env = {}): string {
  if (scheme === "claude") return claudeKey(cwd, env);
  throw new RangeError(`no cwd_key scheme ${JSON.stringify(scheme)}`);
}

/** `a` and `b` joined as Python's `os.path.join` joins two POSIX paths: nothing is normalised
 * (node's `path.join` folds `..`, which is only right where no segment is a link). */
function pyJoin(a: string, b: string): string {
  if (b.startsWith("/")) return b;
  return a === "" || a.endsWith("/") ? a + b : `${a}/${b}`;
}

/** The sessions' root folder, or null when it cannot be known (`~` without an absolute HOME). */
export function sessionsRoot(spec: SessionsSpec, env: Env): string | null {
  const moved = spec.root.env === null ? undefined : env[spec.root.env];
  let root = moved ? moved : spec.root.default;
  if (root === "~" || root.startsWith("~/")) {
    const home = env.HOME;
    if (!home || !home.startsWith("/")) return null;
    root = root === "~" ? home : pyJoin(home, root.slice(2));
  }
  return root.startsWith("/") ? root : null;
}

type Walk = "found" | "none" | "unreadable";

function isMissing(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === "ENOENT" || code === "ENOTDIR";
}

/** One segment of a path template with its placeholders filled in: a name, or a pattern when
 * the template's segment has a `*` (only the template's own `*`: a value filled in is literal). */
type Segment = string | RegExp;

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** The segments of `template` with `{session_id}` and `{cwd_key}` filled in, or null when a value
 * would make a segment other than one plain name. */
function segmentsOf(template: string, values: Record<string, string>): Segment[] | null {
  const segments: Segment[] = [];
  for (const part of template.split("/")) {
    // Placeholders, the template's `*`, and the literal text between them.
    const tokens = part.split(/(\{session_id\}|\{session_id_8\}|\{cwd_key\}|\*)/).filter((t) => t !== "");
    const valueOf = (token: string) => (token.startsWith("{") ? values[token.slice(1, -1)] ?? "" : null);
    const name = tokens.map((t) => valueOf(t) ?? t).join("");
    if (name === "" || name === "." || name === ".." || name.includes("/") || name.includes("\0")) return null;
    if (!tokens.includes("*")) {
      segments.push(name);
      continue;
    }
    const body = tokens.map((t) => (t === "*" ? ".*" : escape(valueOf(t) ?? t))).join("");
    segments.push(new RegExp(`^${body}$`, "s"));
  }
  return segments;
}

async function isFile(path: string): Promise<Walk> {
  try {
    return (await stat(path)).isFile() ? "found" : "none";
  } catch (err) {
    return isMissing(err) ? "none" : "unreadable";
  }
}

/** Whether `segments` below `dir` name a regular file. */
async function walk(dir: string, segments: readonly Segment[]): Promise<Walk> {
  const [segment, ...rest] = segments;
  if (segment === undefined) return "none";
  if (typeof segment === "string") {
    const path = pyJoin(dir, segment);
    return rest.length === 0 ? isFile(path) : walk(path, rest);
  }
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    return isMissing(err) ? "none" : "unreadable";
  }
  let result: Walk = "none";
  for (const name of names.sort()) {
    if (!segment.test(name)) continue;
    const path = pyJoin(dir, name);
    const found = rest.length === 0 ? await isFile(path) : await walk(path, rest);
    if (found === "found") return "found";
    if (found === "unreadable") result = "unreadable";
  }
  return result;
}

/**
 * Whether the session `sessionId` of a harness is on this host: `spec` is the harness's
 * `sessions` (null: `unknown`), `idPattern` its session id pattern.
 */
export async function probeSessions(
  spec: SessionsSpec | null,
  idPattern: RegExp,
  sessionId: string,
  options: ProbeOptions = {},
): Promise<Presence> {
  if (typeof sessionId !== "string" || !idPattern.test(sessionId)) return "absent"; // never a path
  if (spec === null) return "unknown";
  const env = options.env ?? process.env;
  const root = sessionsRoot(spec, env);
  if (root === null) return "unknown";
  let key = "";
  if (spec.cwd_key !== null) {
    if (typeof options.cwd !== "string" || !options.cwd.startsWith("/")) return "unknown";
    key = cwdKey(spec.cwd_key, options.cwd, env);
  }
  try {
    if (!(await stat(root)).isDirectory()) return "absent";
  } catch (err) {
    return isMissing(err) ? "absent" : "unknown";
  }
  // The first 8 characters: code points, as Python counts them.
  const values = { session_id: sessionId, session_id_8: Array.from(sessionId).slice(0, 8).join(""), cwd_key: key };
  let unreadable = false;
  for (const template of spec.paths) {
    const segments = segmentsOf(template, values);
    if (segments === null) continue; // a value that is not one plain name is never a path
    const found = await walk(root, segments);
    if (found === "found") return "present";
    if (found === "unreadable") unreadable = true;
  }
  return unreadable ? "unknown" : "absent";
}
