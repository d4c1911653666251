/**
 * Version ranges of the harness table (`capabilities[].versions`): space-separated comparators,
 * each `>=`, `>`, `<=`, `<` or `=` and a numeric `MAJOR.MINOR.PATCH`; the empty string is every
 * version. Versions compare numerically part by part (of any length, as the Python SDK's integers
 * do); a pre-release or build suffix (`2.1.0-beta.1`, `2.1.0+abc`) is ignored, so `2.1.0-beta.1`
 * is `2.1.0`.
 */

import { pyStrip } from "./match.js";

export type Operator = ">=" | ">" | "<=" | "<" | "=";
export type Version = readonly [bigint, bigint, bigint];

export interface Comparator {
  op: Operator;
  version: Version;
}

const COMPARATOR = /^(>=|<=|>|<|=)(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$/;
/** A version as harnesses print it: `2.1.332`, `v0.61.0`, `1.18.33-beta.2`; missing parts are 0. */
const VERSION = /^v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?(?:[-+].*)?$/s;

/** The comparators of `range`; throws `RangeError` naming the one that is not. */
export function parseRange(range: string): Comparator[] {
  if (typeof range !== "string") throw new RangeError("a version range is a string");
  const parts = range.split(" ").filter((part) => part !== "");
  if (range !== parts.join(" ")) throw new RangeError(`version range ${JSON.stringify(range)}: comparators are separated by one space`);
  return parts.map((part) => {
    const m = COMPARATOR.exec(part);
    if (m === null) throw new RangeError(`version range ${JSON.stringify(range)}: ${JSON.stringify(part)} is not a comparator`);
    return { op: m[1] as Operator, version: [BigInt(m[2]!), BigInt(m[3]!), BigInt(m[4]!)] };
  });
}

/** `version` as three numbers, or null when it is not a version. */
export function parseVersion(version: string): Version | null {
  if (typeof version !== "string") return null;
  const m = VERSION.exec(pyStrip(version));
  if (m === null) return null;
  return [BigInt(m[1]!), BigInt(m[2] ?? 0), BigInt(m[3] ?? 0)];
}

/** -1, 0 or 1 as `a` is before, equal to or after `b`. */
export function compareVersions(a: Version, b: Version): number {
  for (let i = 0; i < 3; i++) {
    if (a[i]! !== b[i]!) return a[i]! < b[i]! ? -1 : 1;
  }
  return 0;
}

/** Whether `version` is in `range` (false for a string that is not a version). */
export function satisfies(version: string, range: string): boolean {
  const v = parseVersion(version);
  if (v === null) return false;
  return parseRange(range).every(({ op, version: bound }) => {
    const c = compareVersions(v, bound);
    switch (op) {
      case ">=":
        return c >= 0;
      case ">":
        return c > 0;
      case "<=":
        return c <= 0;
      case "<":
        return c < 0;
      case "=":
        return c === 0;
    }
  });
}
