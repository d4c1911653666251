/** Decisions and refusals a test's runner receives, collected through `handleDecisions`, and a raw
 * NATS view. */

import { connect as natsConnect, type NatsConnection, type Msg } from "@nats-io/transport-node";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import type { Decision, Refusal, Runner } from "../../src/index.js";
import { waitFor } from "./stack.js";

export class Inbox {
  readonly received: Decision[] = [];
  /** The refusals of the runner's events (contract 10.5), through `onRefusal`. */
  readonly refusals: Refusal[] = [];
  /** Deliveries per decision_id, counting the ones the handler raised on. */
  readonly deliveries = new Map<string, number>();
  /** decision ids whose first delivery the handler raises on. */
  readonly failFirst = new Set<string>();
  /** runs whose every decision's first delivery the handler raises on. */
  readonly failFirstOfRun = new Set<string>();
  readonly done: Promise<void>;

  /** `onRefusal`: also run for each refusal; `refusals: false` leaves them to the SDK's default. */
  constructor(runner: Runner, options: { refusals?: boolean; onRefusal?: (r: Refusal) => Promise<void> } = {}) {
    const collect = async (r: Refusal) => {
      this.refusals.push(r);
      await options.onRefusal?.(r);
    };
    const handle = (d: Decision) => {
      const n = (this.deliveries.get(d.decision_id) ?? 0) + 1;
      this.deliveries.set(d.decision_id, n);
      if (n === 1 && (this.failFirst.has(d.decision_id) || this.failFirstOfRun.has(d.run_id))) {
        throw new Error("the handler failed on purpose");
      }
      this.received.push(d);
    };
    this.done = runner.handleDecisions(handle, options.refusals === false ? {} : { onRefusal: collect });
  }

  of(runId: string): Decision[] {
    return this.received.filter((d) => d.run_id === runId);
  }

  next(runId: string, count = 1, timeoutMs = 30_000): Promise<Decision> {
    return waitFor(() => this.of(runId)[count - 1], `decision ${count} of run ${runId}`, timeoutMs);
  }
}

export interface DeadLetter {
  reason: string;
  text: string;
  body: Record<string, unknown> | null;
}

/** A plain connection of the test itself (the operator's, under the shipped authorization). */
export class Observer {
  private constructor(
    readonly nc: NatsConnection,
    readonly jsm: JetStreamManager,
  ) {}

  /** `credentials`: a user and password (the client does not read them from the URL); a user's
   * replies come below its own inbox prefix, `_INBOX.<user>`, as the shipped authorization allows. */
  static async open(url: string, credentials: { user: string; pass: string } | null = null): Promise<Observer> {
    const inbox = credentials === null ? {} : { inboxPrefix: `_INBOX.${credentials.user}` };
    const nc = await natsConnect({
      servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 250, ...(credentials ?? {}), ...inbox,
    });
    return new Observer(nc, await jetstreamManager(nc));
  }

  /** Dead letters on `subject`, kept as (reason, body text, parsed body or null). */
  deadLetters(subject: string): DeadLetter[] {
    const seen: DeadLetter[] = [];
    this.nc.subscribe(subject, {
      callback: (_err, msg: Msg) => {
        let body: Record<string, unknown> | null = null;
        try {
          body = msg.json<Record<string, unknown>>();
        } catch {
          body = null;
        }
        seen.push({ reason: msg.headers?.get("Continuity-Dead-Reason") ?? "", text: msg.string(), body });
      },
    });
    return seen;
  }

  /** A raw request; returns the error code, or null on success, and the parsed body. */
  async request(subject: string, body: unknown): Promise<{ code: string | null; body: Record<string, unknown> }> {
    const reply = await this.nc.request(subject, JSON.stringify(body), { timeout: 5000 });
    const parsed = reply.json<Record<string, unknown>>();
    const error = parsed.error as { code?: string } | undefined;
    return { code: reply.headers?.get("Nats-Service-Error-Code") ? (error?.code ?? "unknown") : null, body: parsed };
  }

  /** How many messages the stream holds on exactly `subject`. */
  async stored(stream: string, subject: string): Promise<number> {
    const info = await this.jsm.streams.info(stream, { subjects_filter: subject });
    return info.state.subjects?.[subject] ?? 0;
  }

  /** True once the classifier has acknowledged every event it was given. */
  async classifierIdle(): Promise<boolean> {
    const info = await this.jsm.consumers.info("CONTINUITY_EVENTS", "classifier");
    return info.num_pending === 0 && info.num_ack_pending === 0;
  }

  async close(): Promise<void> {
    await this.nc.close();
  }
}
