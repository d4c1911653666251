/**
 * The project's OTLP/HTTP trace receiver (`python -m continuity.devstack.otlp`, from the .venv)
 * as a process of the test: started on a free port it reports itself, its spans read back from
 * the JSON lines it appends to a file, one span a line.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, waitFor } from "./stack.js";

/** One span as the receiver writes it (hex ids; `parent_span_id` "" for a root). */
export interface ReceivedSpan {
  trace_id: string;
  span_id: string;
  parent_span_id: string;
  name: string;
  service: string;
  kind: number;
  attributes: Record<string, unknown>;
  links: [string, string][];
  status: number;
  status_message: string;
  events: string[];
}

const LISTENING = /listening on (http:\/\/127\.0\.0\.1:(\d+))/;

let running: ChildProcess | null = null;
process.on("exit", () => {
  if (running !== null && running.exitCode === null) running.kill("SIGKILL");
});

export class OtlpReceiver {
  readonly dir = mkdtempSync(join(tmpdir(), "continuity-sdkts-otlp-"));
  readonly out = join(this.dir, "spans.jsonl");
  private child: ChildProcess | null = null;
  private printed = "";
  /** The value of `OTEL_EXPORTER_OTLP_ENDPOINT` that sends here (once started). */
  endpoint = "";

  /** Starts it on port 0 and reads the port it bound from the line it prints. */
  async start(timeoutMs = 30_000): Promise<void> {
    const python = join(ROOT, ".venv", "bin", "python");
    const child = spawn(python, ["-m", "continuity.devstack.otlp", "--port", "0", "--out", this.out], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child = child;
    running = child;
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => (this.printed += chunk));
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (this.printed += chunk));
    const match = await waitFor(() => {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`the OTLP receiver exited: ${this.printed}`);
      }
      return LISTENING.exec(this.printed) ?? undefined;
    }, "the OTLP receiver to listen", timeoutMs);
    if (Number(match[2]) === 0) throw new Error(`the OTLP receiver reported port 0: ${this.printed}`);
    this.endpoint = match[1]!;
  }

  /** Every span received so far (a line still being written is left for the next read). */
  spans(): ReceivedSpan[] {
    if (!existsSync(this.out)) return [];
    const text = readFileSync(this.out, "utf8");
    const complete = text.slice(0, text.lastIndexOf("\n") + 1);
    return complete
      .split("\n")
      .filter((line) => line.length > 0)
      .map((line) => JSON.parse(line) as ReceivedSpan);
  }

  /** Stops the process it started (and only that one), then removes its file. */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = null;
    if (child !== null && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((ok) => child.once("exit", () => ok()));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(timer);
    }
    if (running === child) running = null;
    rmSync(this.dir, { recursive: true, force: true });
  }
}
