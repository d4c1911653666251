/**
 * Harness adapters: the shipped harness table, the matcher that turns a resume's outcome into a
 * closed failure class, the presence probe, and `runner.recover`'s verdicts. Imported as the
 * `harness` namespace of the package: `harness.adapter("claude-code").assess(outcome)`.
 */

export {
  canonicalJson,
  canonicalPath,
  canonicalValue,
  changedComponents,
  compareCodePoints,
  componentDigest,
  executable,
  generationOf,
  Components,
  COMPONENT_NAMES,
  PATH_COMPONENTS,
  SET_COMPONENTS,
  type CanonicalValue,
  type ComponentName,
  type ComponentValues,
} from "./compatibility.js";
export { adapter, names, Adapter, UnknownHarness } from "./adapter.js";
export {
  assessWith,
  checkOutcome,
  jsonEqual,
  prepare,
  pyStrip,
  stripAnsi,
  MAX_DOCUMENT_BYTES,
  MAX_DOCUMENT_LINES,
  MAX_OUTCOME_BYTES,
  type Assessment,
  type CheckedOutcome,
  type Outcome,
  type OutcomeError,
  type Prepared,
} from "./match.js";
export { claudeKey, cwdKey, sessionsRoot, CLAUDE_KEY_CHARS, type Env, type Presence, type ProbeOptions } from "./probe.js";
export { NotAFailure, Rejected, Reported, FAILED_STATUS, type RecoverArgs, type Verdict } from "./recover.js";
export {
  loadTable,
  shippedTable,
  validateTable,
  CWD_KEYS,
  HARNESS_CLASSES,
  HARNESS_KINDS,
  InvalidTable,
  PLACEHOLDERS,
  RULE_ID,
  SHIPPED_TABLE,
  type Capabilities,
  type CwdKey,
  type ExitCondition,
  type HarnessClass,
  type HarnessKind,
  type HarnessSpec,
  type HarnessTable,
  type JsonCondition,
  type Rule,
  type SessionsRoot,
  type SessionsSpec,
  type When,
} from "./table.js";
export { compareVersions, parseRange, parseVersion, satisfies, type Comparator, type Operator, type Version } from "./versions.js";
