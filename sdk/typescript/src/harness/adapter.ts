/** One harness of the table, as a runner uses it: `adapter("claude-code")`. */

import { assessWith, type Assessment, type Outcome } from "./match.js";
import { probeSessions, type Presence, type ProbeOptions } from "./probe.js";
import { shippedTable, type Capabilities, type HarnessSpec, type HarnessTable } from "./table.js";
import { satisfies } from "./versions.js";

/** A harness name the table does not have. */
export class UnknownHarness extends Error {
  constructor(readonly harness: string, known: readonly string[]) {
    super(`no harness ${JSON.stringify(harness)} in the table (known: ${known.join(", ")})`);
    this.name = "UnknownHarness";
  }
}

export class Adapter {
  readonly name: string;
  private readonly sessionIdPattern: RegExp;

  constructor(readonly spec: HarnessSpec) {
    this.name = spec.name;
    this.sessionIdPattern = new RegExp(spec.session_id, "u");
  }

  /**
   * The first rule of the harness whose conditions hold for `outcome` decides: its class
   * (`failure_class` null: not a failure) and its id. `InvalidRequest` for an outcome that is not
   * one (naming the field), or one larger than 4 MiB in all (`payload_too_large`).
   */
  assess(outcome: Outcome): Assessment {
    return assessWith(this.spec.rules, outcome);
  }

  /** Whether `sessionId` is one of this harness's session ids. */
  isSessionId(sessionId: string): boolean {
    return typeof sessionId === "string" && this.sessionIdPattern.test(sessionId);
  }

  /**
   * Whether the session is on this host: `present`, `absent` (also for an id that is not one of
   * this harness's, without touching the disk), or `unknown` (the harness keeps no files the
   * probe can read). Only `stat` and `readdir`: no file is opened.
   */
  probe(sessionId: string, options: ProbeOptions = {}): Promise<Presence> {
    return probeSessions(this.spec.sessions, this.sessionIdPattern, sessionId, options);
  }

  /** What `version` of the harness can do: the first entry whose range holds it, or null. */
  capabilities(version: string): Capabilities | null {
    return this.spec.capabilities.find((c) => satisfies(version, c.versions)) ?? null;
  }
}

/** The names of the table's harnesses, in its order. */
export function names(table: HarnessTable = shippedTable()): string[] {
  return table.harnesses.map((h) => h.name);
}

/** The adapter of harness `name` (`UnknownHarness` for a name the table does not have). */
export function adapter(name: string, table: HarnessTable = shippedTable()): Adapter {
  const spec = table.harnesses.find((h) => h.name === name);
  if (spec === undefined) throw new UnknownHarness(name, names(table));
  return new Adapter(spec);
}
