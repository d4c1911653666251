/**
 * Permission violations reported by the NATS server, matched to what is waiting on them.
 *
 * A publication the server's authorization refuses gets no reply at all, only an asynchronous
 * `-ERR 'Permissions Violation for Publish to "<subject>"'`. The client already fails a request
 * whose subject is refused; a pull request for decisions is a plain publication, so `Denials`
 * tells the decisions loop when the server refuses its subject instead of letting it wait forever.
 */

import { PermissionViolationError, type NatsConnection } from "@nats-io/transport-node";
import { PermissionDenied } from "./errors.js";

/** The permission violation `err` is, or was caused by; null when it is something else. */
export function permissionViolation(err: unknown): PermissionViolationError | null {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof PermissionViolationError) return e;
  }
  return null;
}

/** The typed error of a refused publication or subscription (subjects are this runner's own). */
export function denied(violation: PermissionViolationError): PermissionDenied {
  const what = violation.operation === "subscription" ? "subscribe to" : "publish to";
  return new PermissionDenied(403, "permission_denied", `not permitted to ${what} ${violation.subject}`);
}

type Listener = (error: PermissionDenied) => void;

export class Denials {
  private readonly waiting = new Map<string, Set<Listener>>();

  constructor(nc: NatsConnection) {
    void this.follow(nc);
  }

  private async follow(nc: NatsConnection): Promise<void> {
    // Ends when the connection closes.
    for await (const status of nc.status()) {
      if (status.type !== "error") continue;
      const violation = permissionViolation(status.error);
      if (violation === null || violation.operation !== "publish") continue;
      for (const listener of this.waiting.get(violation.subject) ?? []) listener(denied(violation));
    }
  }

  /** Calls `listener` each time the server refuses a publication to `subject`; returns the
   * function that stops it. */
  watch(subject: string, listener: Listener): () => void {
    let listeners = this.waiting.get(subject);
    if (listeners === undefined) {
      listeners = new Set();
      this.waiting.set(subject, listeners);
    }
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0) this.waiting.delete(subject);
    };
  }
}
