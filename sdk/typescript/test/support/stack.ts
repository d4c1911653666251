/**
 * Real servers for the tests: a NATS server with JetStream and a Redis server on free ports, and
 * the four services as `continuity serve <name>` processes (the project's .venv), as production
 * runs them (one in `later` only when the test calls `startService`). The server binaries are
 * found the way `continuity up` finds them (continuity/devstack/servers.py). With
 * `authorization`, the NATS server runs the shipped deploy/nats files, each service signs in as
 * its own user, and the runners are issued by `continuity runners add` for the tests' tenant, as
 * an operator does it. With `operator`, the NATS server runs the decentralized layout of
 * `continuity nats init` instead (docs/operations/nats-authorization.md, "Runners on a running
 * cluster"): each service connects with its creds file, and runners are issued and revoked on the
 * running server.
 */

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer, createConnection } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

export const SERVICES = ["session-store", "classifier", "archiver", "reconciliation"] as const;

function projectRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "pyproject.toml"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("the project root (pyproject.toml) was not found");
    dir = up;
  }
  return dir;
}

export const ROOT = projectRoot();
const VENV_BIN = join(ROOT, ".venv", "bin");

/** The users of deploy/nats/auth.conf that sign in with a password. */
export const PASSWORD_USERS = [...SERVICES, "operator", "console", "system", "monitor"] as const;
export type PasswordUser = (typeof PASSWORD_USERS)[number];

/** The server variable auth.conf reads a user's password from. */
function passwordVariable(user: PasswordUser): string {
  return `CONTINUITY_NATS_${user.toUpperCase().replace(/-/g, "_")}_PASSWORD`;
}

function passwordOf(user: PasswordUser): string {
  return `test-${user}-password`;
}

/** The tenant of every session the tests make (`newSession`), and of the runners they issue. */
export const TENANT = "sdkts";

/** Runs `continuity ARGS...` from the project's .venv; throws with its stderr when it fails, unless
 * it failed with the error code `expected`. */
function continuity(args: string[], expected: string | null = null, env: Record<string, string> = {}): string {
  const out = spawnSync(join(VENV_BIN, "continuity"), args, {
    cwd: ROOT, encoding: "utf8", timeout: 60_000, env: { ...process.env, ...env },
  });
  const allowed = expected !== null && out.stderr.includes(`[${expected}]`);
  if (out.status !== 0 && !allowed) throw new Error(`continuity ${args.slice(0, 2).join(" ")} failed: ${out.stderr}`);
  return out.stdout + out.stderr;
}

/** Polls `check` until it returns a value other than undefined/false, or fails at the deadline. */
export async function waitFor<T>(
  check: () => T | undefined | false | Promise<T | undefined | false>,
  what: string,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(25); // polling with a deadline
  }
}

export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => ok(port));
    });
  });
}

function listening(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      ok(true);
    });
    socket.once("error", () => ok(false));
  });
}

function binary(fn: "nats_server_binary" | "redis_server_binary"): string {
  const out = spawnSync(join(VENV_BIN, "python"), ["-c", `from continuity.devstack.servers import ${fn}; print(${fn}())`], {
    cwd: ROOT,
    encoding: "utf8",
  });
  if (out.status !== 0) throw new Error(`${fn} failed: ${out.stderr}`);
  return out.stdout.trim();
}

const children = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
});

class Proc {
  child: ChildProcess | null = null;
  constructor(
    readonly name: string,
    private readonly command: string,
    private readonly args: string[],
    private readonly logPath: string,
    private readonly env: NodeJS.ProcessEnv = process.env,
  ) {}

  start(): void {
    const log = openSync(this.logPath, "a");
    const child = spawn(this.command, this.args, { cwd: ROOT, env: this.env, stdio: ["ignore", log, log] });
    closeSync(log);
    children.add(child);
    child.once("exit", () => children.delete(child));
    this.child = child;
  }

  get running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  async stop(signal: NodeJS.Signals = "SIGTERM", timeoutMs = 15_000): Promise<void> {
    const child = this.child;
    if (child === null) return;
    this.child = null;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((ok) => child.once("exit", () => ok()));
    child.kill(signal);
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    await exited;
    clearTimeout(timer);
  }
}

export interface StackOptions {
  /** CONTINUITY_RUNNER_KEYS as key id → key bytes. */
  runnerKeys?: Record<string, Uint8Array>;
  env?: Record<string, string>;
  /** The shipped NATS authorization, with these runners issued for `TENANT` and their consumers
   * created (seed files in `seeds`). */
  authorization?: { runners: string[] };
  /** NATS's decentralized layout: the operator folder of `continuity nats init` in `operatorDir`,
   * the server including its operator.conf (its resolver in the stack's folder), each service
   * connecting with the folder's creds file of its user; runners are issued with `issueRunner`
   * once the stack runs. Not with `authorization` or `maxPayload`. */
  operator?: boolean;
  /** false: only the NATS and Redis servers, no service (nothing answers a request). */
  services?: boolean;
  /** The NATS server's `max_payload` in bytes (its default: 1 MiB); not with `authorization`. */
  maxPayload?: number;
  /** Services not started with the stack: `startService` starts each later (as a service that
   * had not yet come up, e.g. a classifier whose consumer does not exist yet). */
  later?: readonly ServiceName[];
}

export type ServiceName = (typeof SERVICES)[number];

export class Stack {
  readonly dir = mkdtempSync(join(tmpdir(), "continuity-sdkts-"));
  natsPort = 0;
  redisPort = 0;
  private nats: Proc | null = null;
  private redis: Proc | null = null;
  private readonly services: { name: string; proc: Proc; metricsPort: number }[] = [];
  /** Each service's environment (without its own NATS user and metrics port) and the test's
   * additions over it, kept for `startService`. */
  private serviceEnv: NodeJS.ProcessEnv = {};
  private testEnv: Record<string, string> = {};
  private authorized = false;
  private operatorMode = false;
  /** Under `authorization`: each issued runner's NKey seed file. */
  readonly seeds: Record<string, string> = {};

  /** The server's URL without credentials (runners sign in with their seed). */
  get natsUrl(): string {
    return `nats://127.0.0.1:${this.natsPort}`;
  }

  get redisUrl(): string {
    return `redis://127.0.0.1:${this.redisPort}/0`;
  }

  /** The URL with a password user's credentials (meaningful under `authorization`). */
  natsUrlOf(user: PasswordUser): string {
    return `nats://${user}:${passwordOf(user)}@127.0.0.1:${this.natsPort}`;
  }

  /** A password user's credentials, for a connection of the test itself. */
  credentialsOf(user: PasswordUser): { user: string; pass: string } {
    return { user, pass: passwordOf(user) };
  }

  /** The folder of the server's authorization files. */
  get confDir(): string {
    return join(this.dir, "nats");
  }

  /** Under `operator`: the folder of `continuity nats init`. */
  get operatorDir(): string {
    return join(this.dir, "operator");
  }

  /** Under `operator`: the creds file of one of the folder's users (a service, `operator`, `archive`). */
  operatorCreds(user: string): string {
    return join(this.operatorDir, "creds", `${user}.creds`);
  }

  /** The server of the decentralized layout: the folder's operator.conf beside a minimal block. */
  private operatorServer(): string[] {
    continuity(["nats", "init", this.operatorDir, "--resolver-dir", join(this.dir, "jwt")]);
    const conf = join(this.dir, "server.conf");
    // An include is read relative to the including file.
    writeFileSync(
      conf,
      `host: 127.0.0.1\nport: ${this.natsPort}\n` +
        `jetstream { store_dir: ${JSON.stringify(join(this.dir, "jetstream"))} }\ninclude ./operator/operator.conf\n`,
    );
    return ["-c", conf];
  }

  /** Under `operator`: `continuity runners add --operator-dir --create-consumer` on the running
   * server, as the folder's operator user, for the tests' tenant; returns the runner's creds file. */
  issueRunner(runner: string): string {
    const creds = join(this.dir, `${runner}.creds`);
    continuity(
      [
        "runners", "add", runner, "--tenant", TENANT, "--creds-file", creds, "--operator-dir", this.operatorDir,
        "--servers", "1", "--create-consumer", "--nats-url", this.natsUrl, "--actor", "sdkts",
      ],
      null,
      { CONTINUITY_NATS_CREDS_FILE: this.operatorCreds("operator") },
    );
    return creds;
  }

  /** Under `operator`: `continuity runners remove --yes --operator-dir`: the runner's account revoked. */
  removeRunner(runner: string): void {
    continuity(
      [
        "runners", "remove", runner, "--yes", "--operator-dir", this.operatorDir, "--servers", "1",
        "--nats-url", this.natsUrl, "--actor", "sdkts",
      ],
      null,
      { CONTINUITY_NATS_CREDS_FILE: this.operatorCreds("operator") },
    );
  }

  /** The NATS server's configuration: the shipped files beside a minimal server block. */
  private authorizedServer(runners: string[]): string[] {
    mkdirSync(this.confDir);
    for (const file of ["auth.conf", "runners.conf", "runner-imports.conf"]) {
      copyFileSync(join(ROOT, "deploy", "nats", file), join(this.confDir, file));
    }
    this.issueRunners(runners);
    const conf = join(this.confDir, "server.conf");
    writeFileSync(
      conf,
      `host: 127.0.0.1\nport: ${this.natsPort}\n` +
        `jetstream { store_dir: ${JSON.stringify(join(this.dir, "jetstream"))} }\ninclude ./auth.conf\n`,
    );
    return ["-c", conf];
  }

  /** `continuity runners add` for each runner, as the operator does it: its seed file, and its
   * account and imports in the server's files, before the server starts. (Added to a running
   * server by a reload, a runner account's requests found no responders, on nats-server 2.9 and
   * 2.15 alike.) No session-store answers yet, so its tenants are not recorded
   * (`tenants_not_recorded`, asked of this stack's own port, where nothing listens yet):
   * `recordRunners` does it once the services run, as the command then says. */
  private issueRunners(runners: string[]): void {
    for (const runner of runners) {
      const seed = join(this.dir, `${runner}.nk`);
      const issue = ["runners", "add", runner, "--tenant", TENANT, "--seed-file", seed, "--conf-dir", this.confDir];
      continuity([...issue, "--nats-url", this.natsUrl, "--timeout", "1", "--actor", "sdkts"], "tenants_not_recorded");
      this.seeds[runner] = seed;
    }
  }

  /** Each runner's tenants in the runner directory, and its decisions consumer, with the
   * operator's credentials once the services have made the streams. */
  private recordRunners(runners: string[]): void {
    const operator = ["--nats-url", this.natsUrlOf("operator")];
    for (const runner of runners) {
      continuity(["runners", "tenants", runner, "--tenant", TENANT, "--actor", "sdkts", ...operator]);
      continuity(["runners", "add", runner, "--consumer-only", ...operator]);
    }
  }

  async start(options: StackOptions = {}): Promise<void> {
    this.natsPort = await freePort();
    this.redisPort = await freePort();
    const authorized = options.authorization !== undefined;
    if (options.operator && (authorized || options.maxPayload !== undefined)) {
      throw new Error("operator goes with neither authorization nor maxPayload");
    }
    this.operatorMode = options.operator === true;
    const natsArgs = authorized
      ? this.authorizedServer(options.authorization?.runners ?? [])
      : this.operatorMode
        ? this.operatorServer()
        : ["-a", "127.0.0.1", "-p", String(this.natsPort), "-js", "-sd", join(this.dir, "jetstream")];
    if (options.maxPayload !== undefined) {
      // No command-line flag sets it: a file does, beside the flags.
      const conf = join(this.dir, "max-payload.conf");
      writeFileSync(conf, `max_payload: ${options.maxPayload}\n`);
      natsArgs.unshift("-c", conf);
    }
    const natsEnv = authorized
      ? { ...process.env, ...Object.fromEntries(PASSWORD_USERS.map((u) => [passwordVariable(u), passwordOf(u)])) }
      : process.env;
    this.nats = new Proc("nats-server", binary("nats_server_binary"), natsArgs, join(this.dir, "nats.log"), natsEnv);
    this.redis = new Proc("redis-server", binary("redis_server_binary"), [
      "--port", String(this.redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
      "--dir", this.dir, "--protected-mode", "no",
    ], join(this.dir, "redis.log"));
    await this.startServer(this.nats, this.natsPort);
    await this.startServer(this.redis, this.redisPort);
    const keys = Object.entries(options.runnerKeys ?? {})
      .map(([id, key]) => `${id}=${Buffer.from(key).toString("base64")}`)
      .join(",");
    this.authorized = authorized;
    this.serviceEnv = {
      ...process.env,
      REDIS_URL: this.redisUrl,
      CONTINUITY_METRICS_HOST: "127.0.0.1",
      CONTINUITY_RUNNER_KEYS: keys,
      CONTINUITY_LOG_LEVEL: "WARNING",
      // The tests' runners are not in the runner directory (contract 10.2): open tenancy, as
      // a development stack runs, unless a test's `env` says otherwise.
      CONTINUITY_TENANCY: "open",
    };
    this.testEnv = options.env ?? {};
    const later = options.later ?? [];
    for (const name of options.services === false ? [] : SERVICES) {
      if (!later.includes(name)) await this.launch(name);
    }
    await this.waitReady();
    if (options.authorization) this.recordRunners(options.authorization.runners);
  }

  private async startServer(proc: Proc, port: number): Promise<void> {
    proc.start();
    await waitFor(async () => {
      if (!proc.running) throw new Error(`${proc.name} exited; see ${this.dir}`);
      return listening(port);
    }, `${proc.name} on port ${port}`, 15_000);
  }

  private async launch(name: ServiceName): Promise<void> {
    const metricsPort = await freePort();
    const creds: Record<string, string> = this.operatorMode
      ? {
          CONTINUITY_NATS_CREDS_FILE: this.operatorCreds(name),
          // The archiver's remote moves go out as the ARCHIVE account's one user.
          ...(name === "archiver" ? { CONTINUITY_NATS_ARCHIVE_CREDS_FILE: this.operatorCreds("archive") } : {}),
        }
      : {};
    const env = {
      ...this.serviceEnv,
      NATS_URL: this.authorized ? this.natsUrlOf(name) : this.natsUrl,
      ...creds,
      CONTINUITY_METRICS_PORT: String(metricsPort),
      ...this.testEnv,
    };
    const proc = new Proc(name, join(VENV_BIN, "continuity"), ["serve", name], join(this.dir, `${name}.log`), env);
    proc.start();
    this.services.push({ name, proc, metricsPort });
  }

  /** Starts a service left out by `later`, and waits until it is ready. */
  async startService(name: ServiceName, timeoutMs = 60_000): Promise<void> {
    if (this.services.some((s) => s.name === name && s.proc.running)) throw new Error(`${name} already runs`);
    await this.launch(name);
    await this.ready(this.services[this.services.length - 1]!, timeoutMs);
  }

  /** Every service answers /readyz with 200 (connected to NATS and Redis, bound to its consumer). */
  async waitReady(timeoutMs = 60_000): Promise<void> {
    for (const service of this.services) await this.ready(service, timeoutMs);
  }

  private async ready(service: { name: string; proc: Proc; metricsPort: number }, timeoutMs: number): Promise<void> {
    await waitFor(async () => {
      if (!service.proc.running) throw new Error(`${service.name} exited; see ${this.dir}/${service.name}.log`);
      try {
        const r = await fetch(`http://127.0.0.1:${service.metricsPort}/readyz`);
        return r.status === 200;
      } catch {
        return false;
      }
    }, `${service.name} ready`, timeoutMs);
  }

  /** Stops one service for good (the rest of the stack keeps running). */
  async stopService(name: string): Promise<void> {
    const service = this.services.find((s) => s.name === name);
    if (service === undefined) throw new Error(`no service ${name}`);
    await service.proc.stop();
  }

  async stopNats(): Promise<void> {
    await this.nats?.stop();
  }

  async startNats(): Promise<void> {
    if (this.nats) await this.startServer(this.nats, this.natsPort);
  }

  async stopRedis(): Promise<void> {
    await this.redis?.stop();
  }

  async startRedis(): Promise<void> {
    if (this.redis) await this.startServer(this.redis, this.redisPort);
  }

  async stop(): Promise<void> {
    await Promise.all(this.services.map((s) => s.proc.stop()));
    this.services.length = 0;
    await this.nats?.stop();
    await this.redis?.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export function randomKey(): Uint8Array {
  return new Uint8Array(randomBytes(32));
}

/** A fresh session slot, unique per test. */
export function newSession(tag: string) {
  const id = randomBytes(6).toString("hex");
  return { tenant: TENANT, conversation_id: `${tag}-${id}`, agent_id: "agent-1" };
}

export function uniqueId(tag: string): string {
  return `${tag}-${randomBytes(6).toString("hex")}`;
}

