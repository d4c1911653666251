/**
 * The presence probe: whether a harness's session is on this host, from the table's `sessions`
 * (where the harness keeps its files). It only asks the file system whether a regular file exists
 * (`stat`) and lists the folders a `*` reads (`readdir`); it never opens a file. A session id that
 * does not match the harness's pattern is `absent` at once: it never becomes part of a path.
 */

import { createHash } from "node:crypto";
import { readdir, stat } from "node:fs/promises";
import { isAbsolute, join } from "node:path";
import type { CwdKey, SessionsSpec } from "./table.js";

/** `present`: a file of the session is there; `absent`: none is; `unknown`: the harness keeps no
 * files the probe can read (an SDK harness, a root the probe may not read). */
export type Presence = "present" | "absent" | "unknown";

export interface ProbeOptions {
  /** The working directory the session was saved in (harnesses that key sessions by it). */
  cwd?: string;
  /** The environment the harness runs with (its root variable and HOME); default process.env. */
  env?: Record<string, string | undefined>;
}

/** How each `cwd_key` scheme turns a working directory into a folder name. */
export const CWD_KEY_SCHEMES: Record<CwdKey, (cwd: string) => string> = {
  /** Claude Code: the absolute path with every character other than A-Z, a-z, 0-9 as `-`. */
  claude: (cwd) => cwd.replace(/[^A-Za-z0-9]/g, "-"),
  /** Gemini CLI: the sha256 hex of the absolute path. */
  gemini: (cwd) => createHash("sha256").update(cwd, "utf8").digest("hex"),
};

export function cwdKey(scheme: CwdKey, cwd: string): string {
  return CWD_KEY_SCHEMES[scheme](cwd);
}

/** The root folder of the sessions, or null when it cannot be known (no HOME for `~`). */
export function sessionsRoot(spec: SessionsSpec, env: Record<string, string | undefined>): string | null {
  const moved = spec.root.env === null ? undefined : env[spec.root.env];
  let root = moved !== undefined && moved !== "" ? moved : spec.root.default;
  if (root === "~" || root.startsWith("~/")) {
    const home = env.HOME;
    if (home === undefined || home === "" || !isAbsolute(home)) return null;
    root = join(home, root.slice(1));
  }
  return isAbsolute(root) ? root : null;
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
    const tokens = part.split(/(\{session_id\}|\{cwd_key\}|\*)/).filter((t) => t !== "");
    const valueOf = (token: string) => (token === "{session_id}" || token === "{cwd_key}" ? values[token.slice(1, -1)] ?? "" : null);
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
    const path = join(dir, segment);
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
    const path = join(dir, name);
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
  let key: string | null = null;
  if (spec.cwd_key !== null) {
    if (options.cwd === undefined || !isAbsolute(options.cwd)) return "unknown";
    key = cwdKey(spec.cwd_key, options.cwd);
  }
  try {
    if (!(await stat(root)).isDirectory()) return "absent";
  } catch (err) {
    return isMissing(err) ? "absent" : "unknown";
  }
  let unreadable = false;
  for (const template of spec.paths) {
    if (template.includes("{cwd_key}") && key === null) continue;
    const segments = segmentsOf(template, { session_id: sessionId, cwd_key: key ?? "" });
    if (segments === null) continue; // a value that is not one plain name is never a path
    const found = await walk(root, segments);
    if (found === "found") return "present";
    if (found === "unreadable") unreadable = true;
  }
  return unreadable ? "unknown" : "absent";
}
