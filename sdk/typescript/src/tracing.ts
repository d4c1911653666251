/**
 * W3C trace context (https://www.w3.org/TR/trace-context/, version `00`) as plain strings, so
 * that a runner can start or continue a trace through Continuity without the SDK depending on
 * any tracing library: every message the SDK sends carries a `traceparent` header, and the
 * decisions and archive requests the services send are read for theirs. A value that is not a
 * valid version-00 traceparent is never passed on: a hostile or broken header reads as absent.
 */

import { randomBytes } from "node:crypto";
import { InvalidRequest } from "./errors.js";

/** The header that carries the trace context on every NATS message, as W3C names it. */
export const TRACEPARENT_HEADER = "traceparent";

const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
const ZERO_TRACE_ID = "0".repeat(32);
const ZERO_SPAN_ID = "0".repeat(16);

/**
 * Whether `value` is a version-00 traceparent, `00-<trace id>-<span id>-<flags>`: exactly 55
 * characters of lower-case hex and dashes, neither id all zeros (W3C calls those invalid). A
 * later version's longer form is refused too: the SDK only ever sends and passes on version 00.
 */
export function isTraceparent(value: unknown): value is string {
  return (
    typeof value === "string" &&
    value.length === 55 &&
    TRACEPARENT.test(value) &&
    value.slice(3, 35) !== ZERO_TRACE_ID &&
    value.slice(36, 52) !== ZERO_SPAN_ID
  );
}

/** `size` random bytes as lower-case hex, drawn again if all zeros (an invalid id). `draw` is
 * the source of randomness (tests give one that returns zeros first). */
export function nonZeroHex(size: number, draw: (size: number) => Uint8Array = randomBytes): string {
  for (;;) {
    const bytes = draw(size);
    if (bytes.length === size && bytes.some((b) => b !== 0)) return Buffer.from(bytes).toString("hex");
  }
}

/** A new trace's root: a random 16-byte trace id, a random 8-byte span id, flags `01` (sampled,
 * so that a tracer that samples by its parent records what follows). */
export function newTraceparent(): string {
  return `00-${nonZeroHex(16)}-${nonZeroHex(8)}-01`;
}

/** A child of `parent`: the same trace id and flags, a new random span id. `InvalidRequest`
 * (field `traceparent`, its value not repeated) when `parent` is not a valid traceparent. */
export function childTraceparent(parent: string): string {
  checkTraceparent(parent);
  return `00-${traceIdOf(parent)}-${nonZeroHex(8)}-${parent.slice(53)}`;
}

/** The 32 hex digits of the trace id of `traceparent` (`InvalidRequest` when it is not valid). */
export function traceIdOf(traceparent: string): string {
  checkTraceparent(traceparent);
  return traceparent.slice(3, 35);
}

/** Refuses a value that is not a traceparent, naming the field and never repeating the value (it
 * may be anything a caller had at hand). */
export function checkTraceparent(value: unknown, field = "traceparent"): asserts value is string {
  if (!isTraceparent(value)) {
    const why = "must be a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>, lower case, ids not all zeros";
    throw new InvalidRequest(400, "invalid_field", `${field}: ${why}`, field);
  }
}
