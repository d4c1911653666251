/** HMAC-SHA256 of a command result (contract 4.2), with `node:crypto`. */

import { createHmac } from "node:crypto";

export const SIGNING_DOMAIN = "continuity.command_result.v1";

export interface SignedFields {
  command: string;
  status: string;
  classification: string | null;
  issued_at: string;
}

/** The UTF-8 bytes that are signed: the contract's eight lines joined by `\n`. */
export function signingInput(runnerId: string, runId: string, attempt: number, fields: SignedFields): Buffer {
  const lines = [
    SIGNING_DOMAIN,
    runnerId,
    runId,
    String(attempt),
    fields.command,
    fields.status,
    fields.classification ?? "",
    fields.issued_at,
  ];
  return Buffer.from(lines.join("\n"), "utf8");
}

/** The lowercase hex signature of `fields` under `key`. */
export function sign(key: Uint8Array, runnerId: string, runId: string, attempt: number, fields: SignedFields): string {
  return createHmac("sha256", key).update(signingInput(runnerId, runId, attempt, fields)).digest("hex");
}
