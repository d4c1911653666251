"""`continuity bench sessions`: decide and commit through 1..N session-store processes
(`--replicas N`), next to a NATS micro echo service process and a Redis EVALSHA of a trivial
script, all measured in the same run, with the CPU milliseconds and system calls per request of
the session-store processes and of the echo process (`procstat`)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import nats
import redis.asyncio as aioredis

from continuity.cli.examples import examples
from continuity.devstack.servers import RedisServer
from continuity.tools.bench.deployment import (
    Deployment,
    add_arguments,
    deployment,
    describe,
    machine,
    printed,
)
from continuity.tools.bench.stats import (
    Figures,
    cost_line,
    costs,
    costs_around,
    cpu_bound,
    load,
    median,
    ratio,
)
from shared.contract import CommitRequest, DecideRequest, SessionRef, subjects
from shared.contract.client import ContinuityClient, RunnerSessions
from shared.contract.tenancy import RunnerPutRequest
from shared.platform.bus.connection import server_list
from shared.records import keys

CWD = "/workspaces/acme-platform/conversations/7f3a9c21/agents/code"  # 60 characters
assert len(CWD) == 60


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("sessions", help="decide/commit throughput and latency vs raw baselines")
    p.add_argument("--requests", type=int, default=20000, help="requests per measurement")
    p.add_argument("--concurrency", type=int, default=64, help="concurrent requesters")
    p.add_argument("--sessions", type=int, default=2000, help="session records to decide on")
    p.add_argument("--rounds", type=int, default=5, help="rounds; the median round is reported (default 5)")
    add_arguments(p)
    p.add_argument(
        "--wait-replicas",
        type=int,
        default=0,
        metavar="N",
        help="give the bench's Redis N replicas, and measure commits again with "
        "CONTINUITY_REDIS_WAIT_REPLICAS=N: the two throughputs and their ratio (default 0: not measured)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)
    examples(
        p,
        "continuity bench sessions",
        "continuity bench sessions --json",
        "continuity bench sessions --wait-replicas 1",
    )


def session(i: int) -> SessionRef:
    return SessionRef(tenant=TENANT, conversation_id=f"conv-{i:08d}", agent_id="codex-main")


RUNNER = "bench-runner"
TENANT = "acme-platform"
SERVICE_ENV = {"CONTINUITY_LOG_LEVEL": "WARNING", "CONTINUITY_TENANCY": "enforced"}


def commit_request(i: int, n: int = 0) -> CommitRequest:
    return CommitRequest(
        session=session(i),
        native_session_id=f"019a7c3e-5b7d-7c4e-9f3a-{i:012d}",
        adapter="codex",
        model="gpt-5-codex",
        cwd=CWD,
        cursor=f"turn-{n:06d}",
        prompt_hash=f"{i:016x}",
        checkpoint_policy="allow_replacement_after_resume_failure",
        compatibility_generation="dsh-2026.11.3-p7",
    )


def decide_request(i: int) -> DecideRequest:
    return DecideRequest(
        session=session(i),
        adapter="codex",
        model="gpt-5-codex",
        cwd=CWD,
        latest_cursor="turn-000000",
        compatibility="profile-ready",
        ready_generation="dsh-2026.11.3-p7",
    )


def step_figures(replicas: int, rounds: dict[str, list[Figures]], first_per_s: float) -> dict[str, Any]:
    """The figures of one replica count: median rounds, and costs over all its rounds."""
    echo_f, decide_f, commit_f, evalsha_f = (median(rounds[k]) for k in KINDS)
    decide_c, commit_c, echo_c = costs(rounds["decide"]), costs(rounds["commit"]), costs(rounds["echo"])
    around, echo_around = costs_around(rounds["decide"]), costs_around(rounds["echo"])
    bound = cpu_bound(decide_c["cpu_ms_per_op"], around, echo_c["cpu_ms_per_op"], echo_around, DECIDE_TARGET)
    return {
        "replicas": replicas,
        "echo_per_s": round(echo_f.per_s),
        "echo_p50_ms": round(echo_f.p50_ms, 3),
        "echo_p99_ms": round(echo_f.p99_ms, 3),
        "decide_per_s": round(decide_f.per_s),
        "decide_p50_ms": round(decide_f.p50_ms, 3),
        "decide_p99_ms": round(decide_f.p99_ms, 3),
        "commit_per_s": round(commit_f.per_s),
        "commit_p50_ms": round(commit_f.p50_ms, 3),
        "commit_p99_ms": round(commit_f.p99_ms, 3),
        "evalsha_per_s": round(evalsha_f.per_s),
        "evalsha_p99_ms": round(evalsha_f.p99_ms, 3),
        "decide_ratio": ratio(decide_f.per_s, echo_f.per_s),
        "decide_p99_ratio": ratio(decide_f.p99_ms, echo_f.p99_ms),
        "commit_ratio": ratio(commit_f.per_s, evalsha_f.per_s),
        "decide_scaling": ratio(decide_f.per_s, first_per_s or decide_f.per_s),
        "decide_cpu_ms_per_request": decide_c["cpu_ms_per_op"],
        "decide_writes_per_request": decide_c["writes_per_op"],
        "commit_cpu_ms_per_request": commit_c["cpu_ms_per_op"],
        "commit_writes_per_request": commit_c["writes_per_op"],
        "echo_cpu_ms_per_request": echo_c["cpu_ms_per_op"],
        "echo_writes_per_request": echo_c["writes_per_op"],
        "decide_around_cpu_ms_per_request": around,
        "echo_around_cpu_ms_per_request": echo_around,
        "decide_cpu_ratio": bound["cpu_ratio"],
        "decide_cpu_budget_ms_per_request": bound["cpu_budget_ms"],
        "decide_rounds_per_s": [round(f.per_s) for f in rounds["decide"]],
        "echo_rounds_per_s": [round(f.per_s) for f in rounds["echo"]],
    }


KINDS = ("echo", "decide", "commit", "evalsha")
DECIDE_TARGET = 0.9
"""decide's throughput goal, as a ratio to the micro echo's."""


async def measure(d: Deployment, args: argparse.Namespace, echo_pid: int) -> dict[str, Any]:
    nc = await nats.connect(servers=server_list(d.stack.nats_url))
    client = ContinuityClient(nc, timeout=30)
    # A runner's path, as runners take it (contract 10): its own subjects, issued for the
    # sessions' tenant, with tenancy enforced; its commits bind the sessions to it.
    await client.runner_put(RunnerPutRequest(runner_id=RUNNER, tenants=[TENANT], actor="bench"))
    runner = RunnerSessions(client, RUNNER)
    decide_subject = subjects.runner_sessions(RUNNER, "decide")
    r = aioredis.Redis.from_url(d.stack.redis_url, max_connections=args.concurrency * 2)
    sessions = args.sessions
    await asyncio.gather(*(runner.commit(commit_request(i)) for i in range(sessions)))
    decide_payloads = [msgspec.json.encode(decide_request(i)) for i in range(sessions)]
    echo_payload = decide_payloads[0]
    sha = await r.script_load("return 1")

    async def echo(i: int) -> object:
        return await nc.request("continuity.bench.echo", echo_payload, timeout=30)

    async def decide(i: int) -> object:
        reply = await nc.request(decide_subject, decide_payloads[i % sessions], timeout=30)
        if reply.headers:
            raise RuntimeError("decide failed during the benchmark")
        return reply

    async def commit(i: int) -> object:
        return await runner.commit(commit_request(sessions + i, i))

    async def evalsha(i: int) -> object:
        return await r.evalsha(sha, 0)  # type: ignore[misc]

    kinds = {"echo": echo, "decide": decide, "commit": commit, "evalsha": evalsha}
    steps: list[dict[str, Any]] = []
    for replicas in range(1, args.replicas + 1):
        rounds = await _step_rounds(d, args, kinds, replicas, echo_pid)
        first = steps[0]["decide_per_s"] if steps else 0.0
        steps.append(step_figures(replicas, rounds, first))
    waited: dict[str, Any] = {}
    if args.wait_replicas:
        waited = await _commits_with_wait(d, args, kinds, steps[0])
    sizes = [
        int(await r.memory_usage(keys.session(session(i).key), samples=0) or 0)
        for i in range(0, sessions, 97)
    ]
    version = nc.connected_server_version
    nats_version = f"{version.major}.{version.minor}.{version.patch}"
    await r.aclose()
    await nc.close()
    return {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "production": args.production,
        **{k: v for k, v in steps[0].items() if k not in ("replicas", "decide_scaling")},
        "bytes_per_session": round(statistics.mean(sizes)),
        "nats_version": nats_version,
        "steps": steps,
        **waited,
    }


async def _step_rounds(
    d: Deployment,
    args: argparse.Namespace,
    kinds: Mapping[str, Callable[[int], Awaitable[object]]],
    replicas: int,
    echo_pid: int,
) -> dict[str, list[Figures]]:
    """The session-store scaled to `replicas`, warmed up, then `--rounds` rounds of each kind."""
    await d.scale_async("session-store", replicas, SERVICE_ENV)
    service = d.pids("session-store")
    pids = {"echo": [echo_pid], "decide": service, "commit": service, "evalsha": []}
    for name, op in kinds.items():  # warm up connections, caches, pools and the new replica
        if replicas == 1 or name in ("decide", "commit"):
            await load("warmup", op, total=min(2000, args.requests), concurrency=args.concurrency)
    rounds: dict[str, list[Figures]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for name, op in kinds.items():
            rounds[name].append(
                await load(
                    name,
                    op,
                    total=args.requests,
                    concurrency=args.concurrency,
                    pids=pids[name],
                    around=d.around(),
                )
            )
    return rounds


async def _commits_with_wait(
    d: Deployment, args: argparse.Namespace, kinds: dict[str, Any], without: dict[str, Any]
) -> dict[str, Any]:
    """Commits and decides through one session-store that waits for `--wait-replicas` replicas
    (Redis WAIT after each commit script, and the read fence of a record not yet confirmed),
    against the same servers as the ones measured without."""
    for service in d.replicas("session-store"):
        service.proc.terminate()
        await asyncio.to_thread(service.proc.wait, 30)
        d.stack.services.remove(service)
    env = {
        **SERVICE_ENV,
        "CONTINUITY_REDIS_WAIT_REPLICAS": str(args.wait_replicas),
        "CONTINUITY_REDIS_WAIT_TIMEOUT_MS": "1000",
    }
    await d.scale_async("session-store", 1, env)
    pids = d.pids("session-store")
    await load("warmup", kinds["commit"], total=min(2000, args.requests), concurrency=args.concurrency)
    rounds = [
        await load("commit", kinds["commit"], total=args.requests, concurrency=args.concurrency, pids=pids)
        for _ in range(args.rounds)
    ]
    decide, total, concurrency = kinds["decide"], args.requests, args.concurrency
    decides = median(
        [await load("decide", decide, total=total, concurrency=concurrency, pids=pids) for _ in rounds]
    )
    figures = median(rounds)
    commit_per_s = without["commit_per_s"]
    return {
        "decide_wait_per_s": round(decides.per_s),
        "decide_wait_p99_ms": round(decides.p99_ms, 3),
        "decide_wait_ratio": ratio(decides.per_s, without["decide_per_s"]),
        "wait_replicas": args.wait_replicas,
        "commit_wait_per_s": round(figures.per_s),
        "commit_wait_p50_ms": round(figures.p50_ms, 3),
        "commit_wait_p99_ms": round(figures.p99_ms, 3),
        "commit_wait_ratio": ratio(figures.per_s, commit_per_s),
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        f"session-store benchmark: {result['requests']} requests x {result['rounds']} rounds, "
        f"{result['concurrency']} concurrent requesters (median round)",
        f"  {'':<26}{'per second':>12}{'p50 ms':>10}{'p99 ms':>10}{'CPU ms/req':>12}{'writes/req':>12}",
    ]
    for s in result["steps"]:
        k = s["replicas"]
        lines += [
            f"  {'baseline: micro echo':<26}{s['echo_per_s']:>12}{s['echo_p50_ms']:>10}"
            f"{s['echo_p99_ms']:>10}{s['echo_cpu_ms_per_request']:>12}{s['echo_writes_per_request']:>12}",
            f"  {f'decide, {k} replica(s)':<26}{s['decide_per_s']:>12}{s['decide_p50_ms']:>10}"
            f"{s['decide_p99_ms']:>10}{s['decide_cpu_ms_per_request']:>12}{s['decide_writes_per_request']:>12}",
            f"  {'baseline: EVALSHA':<26}{s['evalsha_per_s']:>12}{'':>10}{s['evalsha_p99_ms']:>10}",
            f"  {f'commit, {k} replica(s)':<26}{s['commit_per_s']:>12}{s['commit_p50_ms']:>10}"
            f"{s['commit_p99_ms']:>10}{s['commit_cpu_ms_per_request']:>12}{s['commit_writes_per_request']:>12}",
            f"  {'':<26}decide / echo {s['decide_ratio']:.3f}, "
            f"decide to 1 replica {s['decide_scaling']:.3f}, commit / EVALSHA {s['commit_ratio']:.3f}",
            f"  {'':<26}CPU ms/req elsewhere, decide: {cost_line(s['decide_around_cpu_ms_per_request'])}"
            f"; echo: {cost_line(s['echo_around_cpu_ms_per_request'])}",
            f"  {'':<26}decide / echo the summed CPU allows {s['decide_cpu_ratio']:.3f}; for"
            f" {DECIDE_TARGET} decide may spend {s['decide_cpu_budget_ms_per_request']} ms/req",
        ]
    lines += [
        f"  decide / echo throughput   {result['decide_ratio']:.3f}  (1 replica; target >= {DECIDE_TARGET})",
        f"  decide / echo p99          {result['decide_p99_ratio']:.3f}  (target <= 3)",
        f"  commit / EVALSHA           {result['commit_ratio']:.3f}  (target >= 0.5)",
        f"  Redis bytes per session    {result['bytes_per_session']}  (target <= 512)",
        *(
            [
                f"  commit with WAIT {result['wait_replicas']}: {result['commit_wait_per_s']} per second, "
                f"p50 {result['commit_wait_p50_ms']} ms, p99 {result['commit_wait_p99_ms']} ms; "
                f"with / without WAIT {result['commit_wait_ratio']:.3f} "
                f"(CONTINUITY_REDIS_WAIT_REPLICAS; both with the replicas attached)",
                f"  decide with WAIT {result['wait_replicas']}: {result['decide_wait_per_s']} per second, "
                f"p99 {result['decide_wait_p99_ms']} ms; with / without {result['decide_wait_ratio']:.3f} "
                f"(records confirmed: the read fence costs them nothing more than a field read)",
            ]
            if "wait_replicas" in result
            else []
        ),
        "  CPU ms/req: utime+stime of the session-store processes (or the echo process) per request",
        *describe(result),
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if min(args.requests, args.concurrency, args.sessions, args.rounds, args.replicas) < 1:
        print("error: --requests, --concurrency, --sessions, --rounds and --replicas must be at least 1",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.wait_replicas < 0:
        print("error: --wait-replicas must be 0 or more", file=sys.stderr)
        return 2
    started = machine()
    with (
        tempfile.TemporaryDirectory(prefix="continuity-bench-") as tmp,
        deployment(Path(tmp), args.production) as d,
    ):
        echo: subprocess.Popen[bytes] | None = None
        replicas: list[RedisServer] = []
        try:
            if args.wait_replicas:
                if d.stack.redis is None:
                    print(
                        "error: --wait-replicas needs the bench's own Redis: unset REDIS_URL", file=sys.stderr
                    )
                    return 2
                replicas = _start_replicas(d.stack.redis, args.wait_replicas, Path(tmp))
            d.scale("session-store", 1, SERVICE_ENV)
            echo = subprocess.Popen(
                [sys.executable, "-m", "continuity.tools.bench.echo", d.stack.nats_url],
                stdout=subprocess.PIPE,
            )
            assert echo.stdout is not None
            echo.stdout.readline()  # "ready"
            import uvloop

            result = uvloop.run(measure(d, args, echo.pid))
        finally:
            if echo is not None:
                echo.terminate()
                echo.wait()
            for replica in replicas:
                replica.stop()
        result["servers"] = d.facts
    return printed(result, started, args.json, report)


def _start_replicas(primary: RedisServer, count: int, data_dir: Path) -> list[RedisServer]:
    """`count` replicas of `primary`, once each is online (synchronised)."""
    replicas = []
    for i in range(count):
        replica = RedisServer(
            data_dir / f"redis-replica-{i}", extra_args=("--replicaof", "127.0.0.1", str(primary.port))
        )
        replica.start()
        replicas.append(replica)
    deadline = time.monotonic() + 30
    while primary.cli("INFO", "replication").count("state=online") < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} Redis replica(s) did not come online within 30 s")
        time.sleep(0.1)  # polling the primary's replication state with a deadline
    return replicas
