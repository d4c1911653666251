/** `connect()` options and how they become NATS connection options. */

import { readFileSync } from "node:fs";
import { credsAuthenticator, nkeyAuthenticator, type NodeConnectionOptions } from "@nats-io/transport-node";
import { RUNNER_ID_PATTERN, TOKEN_PATTERN } from "./contract.js";
import { InvalidRequest } from "./errors.js";

export interface ConnectOptions {
  /** NATS servers: a list, or one comma-separated string. */
  servers: string | string[];
  /** This runner's id (contract 1: `^[A-Za-z0-9_-]{1,64}$`); it names its subjects and consumer. */
  runnerId: string;
  /** Credentials: an NKey seed (or a file holding it), or a NATS creds file, or user and
   * password, or a token. At most one of `nkeySeed`, `nkeySeedFile` and `credsFile`. */
  nkeySeed?: string;
  nkeySeedFile?: string;
  /** A NATS creds file (a user JWT and its seed), as `continuity runners add --operator-dir`
   * writes for a runner of the decentralized layout; read once, at `connect`. */
  credsFile?: string;
  user?: string;
  password?: string;
  token?: string;
  /** TLS: file paths of the CA bundle, the client certificate and its key. */
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  /** Where replies arrive; default `_INBOX.<runnerId>`, the only prefix the shipped authorization allows. */
  inboxPrefix?: string;
  /** HMAC keys for command results, by key id (contract 4.2). */
  signingKeys?: Record<string, Uint8Array>;
  /** Which of `signingKeys` signs; default: the only one. */
  signingKeyId?: string;
  /** Seconds `connect` may take to make the first connection, trying every server in turn;
   * default 5. After that it throws `Unavailable`, so a runner whose NATS is unreachable, or is
   * something else that accepts the connection but never speaks NATS, fails at start instead of
   * hanging. Once connected, the connection reconnects forever. */
  connectTimeout?: number;
  /** Seconds to wait for a reply to a request or a publish acknowledgement; default 5. */
  requestTimeout?: number;
  /** How long `reportResumeFailure` keeps retrying one event: at most this many publishes... */
  publishAttempts?: number;
  /** ...and at most this many seconds in all; defaults 30 and 60. */
  publishDeadline?: number;
  /** Look the decisions consumer `<runnerId>` up and create it when missing (default true; a
   * lookup the server refuses binds it as it is). `false` binds it without any JetStream API
   * call, as the shipped NATS authorization requires: an operator creates the consumer. */
  createConsumer?: boolean;
  /** Seconds JetStream waits for a decision's acknowledgement before delivering it again, when
   * this runner creates its consumer; default 30. */
  ackWait?: number;
  /** Seconds before a decision whose handler raised is delivered again; default 1. */
  nakDelay?: number;
  /** Called before each retry of an event publish (for logs and metrics). */
  onPublishRetry?: (eventId: string, attempt: number, error: Error) => void;
  /** Client name shown by the NATS server; default `continuity-runner-<runnerId>`. */
  name?: string;
  /**
   * The trace context of what the runner is doing, as a W3C `traceparent` (see tracing.ts): each
   * request and event that is given no `traceparent` of its own carries this hook's value, so
   * that the services' spans join the runner's trace. Wire it to your tracer; with OpenTelemetry
   * JS: `() => { const carrier: Record<string, string> = {}; propagation.inject(context.active(),
   * carrier); return carrier.traceparent; }`. Called once for each message sent without a
   * `traceparent` of its own; a value that is not a valid traceparent, or a hook that throws, is ignored and the message starts a new trace
   * instead (a tracer's bug must not stop a recovery).
   */
  traceContext?: () => string | undefined;
}

export interface Settings {
  runnerId: string;
  signingKeys: Record<string, Uint8Array>;
  signingKeyId: string | null;
  connectTimeoutMs: number;
  requestTimeoutMs: number;
  publishAttempts: number;
  publishDeadlineMs: number;
  nakDelayMs: number;
  ackWaitMs: number;
  createConsumer: boolean;
  onPublishRetry: ((eventId: string, attempt: number, error: Error) => void) | null;
  traceContext: (() => unknown) | null;
}

/** An option `connect` cannot use: named, its value never repeated (it may be a secret). */
function refused(option: string, why: string): InvalidRequest {
  return new InvalidRequest(400, "invalid_field", `${option}: ${why}`, option);
}

function positive(value: number | undefined, fallback: number, what: string): number {
  const v = value ?? fallback;
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) throw refused(what, "must be a positive number");
  return v;
}

/** The NKey and creds options given: a runner signs in as one user, so at most one is allowed. */
const KEY_OPTIONS = ["nkeySeed", "nkeySeedFile", "credsFile"] as const;

export function settingsOf(options: ConnectOptions): Settings {
  const keys = KEY_OPTIONS.filter((option) => options[option] !== undefined);
  if (keys.length > 1) throw refused(keys[keys.length - 1]!, `give only one of ${KEY_OPTIONS.join(", ")}`);
  if (typeof options.runnerId !== "string" || !RUNNER_ID_PATTERN.test(options.runnerId)) {
    throw refused("runner_id", "must match ^[A-Za-z0-9_-]{1,64}$");
  }
  const signingKeys = { ...(options.signingKeys ?? {}) };
  const ids = Object.keys(signingKeys);
  for (const id of ids) {
    if (!TOKEN_PATTERN.test(id)) throw refused("signingKeys", "a signing key id must be a contract token");
  }
  const signingKeyId = options.signingKeyId ?? (ids.length === 1 ? ids[0]! : null);
  if (options.signingKeyId !== undefined && !(options.signingKeyId in signingKeys)) {
    throw refused("signingKeyId", "names no key of signingKeys");
  }
  if (options.traceContext !== undefined && typeof options.traceContext !== "function") {
    throw refused("traceContext", "must be a function returning a traceparent");
  }
  return {
    runnerId: options.runnerId,
    signingKeys,
    signingKeyId,
    connectTimeoutMs: positive(options.connectTimeout, 5, "connectTimeout") * 1000,
    requestTimeoutMs: positive(options.requestTimeout, 5, "requestTimeout") * 1000,
    publishAttempts: Math.floor(positive(options.publishAttempts, 30, "publishAttempts")),
    publishDeadlineMs: positive(options.publishDeadline, 60, "publishDeadline") * 1000,
    nakDelayMs: positive(options.nakDelay, 1, "nakDelay") * 1000,
    ackWaitMs: positive(options.ackWait, 30, "ackWait") * 1000,
    createConsumer: options.createConsumer ?? true,
    onPublishRetry: options.onPublishRetry ?? null,
    traceContext: options.traceContext ?? null,
  };
}

export function serverList(servers: string | string[]): string[] {
  const list = (Array.isArray(servers) ? servers : String(servers ?? "").split(","))
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  if (list.length === 0) throw refused("servers", "no NATS server given");
  return list;
}

/** The creds file's bytes, refused before any connection when it cannot be read or holds no
 * JWT and seed (the client would otherwise fail only at the server's greeting, as Unavailable). */
function credsOf(path: string): Uint8Array {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    throw refused("credsFile", "cannot be read");
  }
  // The two fenced blocks the client parses: the user JWT, then the user's seed.
  const blocks = [...text.matchAll(/-{3,}[^\n]*-{3,}\n\s*(\S+)\s*\n\s*-{3,}[^\n]*-{3,}/g)].map((m) => m[1]!);
  if (blocks.length < 2 || !blocks[0]!.startsWith("eyJ") || !blocks[1]!.startsWith("SU")) {
    throw refused("credsFile", "is not a NATS creds file (a user JWT and its seed)");
  }
  return new TextEncoder().encode(text);
}

/** NATS options: reconnect forever, replies on the runner's own inbox prefix. */
export function natsOptions(options: ConnectOptions, settings: Settings): NodeConnectionOptions {
  const servers = serverList(options.servers);
  const nats: NodeConnectionOptions = {
    servers,
    name: options.name ?? `continuity-runner-${options.runnerId}`,
    inboxPrefix: options.inboxPrefix ?? `_INBOX.${options.runnerId}`,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    // One server's share of connectTimeout, so that every server is tried within it (`connect`
    // bounds the whole).
    timeout: Math.max(1, Math.floor(settings.connectTimeoutMs / servers.length)),
  };
  const seed = options.nkeySeed ?? (options.nkeySeedFile ? readFileSync(options.nkeySeedFile, "utf8") : undefined);
  if (options.credsFile !== undefined) {
    nats.authenticator = credsAuthenticator(credsOf(options.credsFile));
  } else if (seed !== undefined) {
    nats.authenticator = nkeyAuthenticator(new TextEncoder().encode(seed.trim()));
  } else if (options.user !== undefined) {
    nats.user = options.user;
    nats.pass = options.password ?? "";
  } else if (options.token !== undefined) {
    nats.token = options.token;
  }
  if (options.tlsCa || options.tlsCert || options.tlsKey) {
    nats.tls = {
      ...(options.tlsCa ? { caFile: options.tlsCa } : {}),
      ...(options.tlsCert ? { certFile: options.tlsCert } : {}),
      ...(options.tlsKey ? { keyFile: options.tlsKey } : {}),
    };
  }
  return nats;
}
