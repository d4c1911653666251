export * from "./contract.js";
export * from "./errors.js";
export { sign, signingInput, SIGNING_DOMAIN, type SignedFields } from "./signing.js";
export { type ConnectOptions } from "./options.js";
export * as harness from "./harness/index.js";
export { childTraceparent, isTraceparent, newTraceparent, traceIdOf, TRACEPARENT_HEADER } from "./tracing.js";
export {
  connect,
  Delivery,
  Runner,
  subjects,
  DECISIONS_STREAM,
  EVENTS_STREAM,
  REPORTS_KEPT,
  type ArchiveHandler,
  type DecisionHandler,
  type HandleOptions,
  type RefusalHandler,
  type SessionOp,
  type ResumeFailureArgs,
  type TurnCompletedArgs,
  type SignArgs,
  type TraceContext,
  type TraceOptions,
} from "./runner.js";
