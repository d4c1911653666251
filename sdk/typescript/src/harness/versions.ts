/**
 * Version ranges of the harness table (`capabilities[].versions`): space-separated comparators,
 * each `>=`, `>`, `<=`, `<` or `=` and a numeric `MAJOR.MINOR.PATCH`; the empty string is every
 * version. Versions compare numerically part by part; a pre-release or build suffix
 * (`2.1.0-beta.1`, `2.1.0+abc`) is ignored, so `2.1.0-beta.1` is `2.1.0`.
 */

export type Operator = ">=" | ">" | "<=" | "<" | "=";

export interface Comparator {
  op: Operator;
  version: readonly [number, number, number];
}

const COMPARATOR = /^(>=|<=|>|<|=)(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$/;
/** A version as harnesses print it: `2.1.332`, `v0.61.0`, `1.18.33-beta.2`; missing parts are 0. */
const VERSION = /^v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?(?:[-+].*)?$/s;

/** The comparators of `range`; throws `RangeError` naming the bad one. */
export function parseRange(range: string): Comparator[] {
  if (typeof range !== "string") throw new RangeError("a version range is a string");
  const parts = range.split(" ").filter((part) => part !== "");
  if (range !== parts.join(" ")) throw new RangeError(`version range ${JSON.stringify(range)}: comparators are separated by one space`);
  return parts.map((part) => {
    const m = COMPARATOR.exec(part);
    if (m === null) throw new RangeError(`version range ${JSON.stringify(range)}: ${JSON.stringify(part)} is not a comparator`);
    return { op: m[1] as Operator, version: [Number(m[2]), Number(m[3]), Number(m[4])] };
  });
}

/** `version` as three numbers, or null when it is not a version. */
export function parseVersion(version: string): [number, number, number] | null {
  if (typeof version !== "string") return null;
  const m = VERSION.exec(version.trim());
  if (m === null) return null;
  const parts = [m[1], m[2], m[3]].map((p) => (p === undefined ? 0 : Number(p)));
  if (!parts.every(Number.isSafeInteger)) return null;
  return parts as [number, number, number];
}

export function compareVersions(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < 3; i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d < 0 ? -1 : 1;
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
