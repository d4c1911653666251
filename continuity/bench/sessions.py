"""`continuity bench sessions`: decide and commit through the session-store, next to a NATS
micro echo service and a Redis EVALSHA of a trivial script, all measured in the same run."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import nats
import redis.asyncio as aioredis

from continuity.bench.stats import Figures, load, ratio
from continuity.stack import Stack
from shared import keys, subjects
from shared.bus.connection import server_list
from shared.client import ContinuityClient
from shared.contracts import CommitRequest, DecideRequest, SessionRef

CWD = "/workspaces/acme-platform/conversations/7f3a9c21/agents/code"  # 60 characters
assert len(CWD) == 60


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("sessions", help="decide/commit throughput and latency vs raw baselines")
    p.add_argument("--requests", type=int, default=20000, help="requests per measurement")
    p.add_argument("--concurrency", type=int, default=64, help="concurrent requesters")
    p.add_argument("--sessions", type=int, default=2000, help="session records to decide on")
    p.add_argument("--rounds", type=int, default=3, help="rounds; the median round is reported")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)


def session(i: int) -> SessionRef:
    return SessionRef(tenant="acme-platform", conversation_id=f"conv-{i:08d}", agent_id="codex-main")


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


async def measure(nats_url: str, redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    nc = await nats.connect(servers=server_list(nats_url))
    client = ContinuityClient(nc, timeout=30)
    r = aioredis.Redis.from_url(redis_url, max_connections=args.concurrency * 2)
    sessions = args.sessions
    await asyncio.gather(*(client.commit(commit_request(i)) for i in range(sessions)))
    decide_payloads = [msgspec.json.encode(decide_request(i)) for i in range(sessions)]
    echo_payload = decide_payloads[0]
    sha = await r.script_load("return 1")

    async def echo(i: int) -> object:
        return await nc.request("continuity.bench.echo", echo_payload, timeout=30)

    async def decide(i: int) -> object:
        reply = await nc.request(subjects.SESSIONS_DECIDE, decide_payloads[i % sessions], timeout=30)
        if reply.headers:
            raise RuntimeError("decide failed during the benchmark")
        return reply

    async def commit(i: int) -> object:
        return await client.commit(commit_request(sessions + i, i))

    async def evalsha(i: int) -> object:
        return await r.evalsha(sha, 0)  # type: ignore[misc]

    kinds = {"echo": echo, "decide": decide, "commit": commit, "evalsha": evalsha}
    for op in kinds.values():  # warm up connections, caches and pools
        await load("warmup", op, total=min(2000, args.requests), concurrency=args.concurrency)
    rounds: dict[str, list[Figures]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for name, op in kinds.items():
            rounds[name].append(await load(name, op, total=args.requests, concurrency=args.concurrency))
    median = {k: sorted(v, key=lambda f: f.per_s)[len(v) // 2] for k, v in rounds.items()}
    sizes = [
        int(await r.memory_usage(keys.session(session(i).key), samples=0) or 0)
        for i in range(0, sessions, 97)
    ]
    await r.aclose()
    await nc.close()
    echo_f, decide_f, commit_f, evalsha_f = (median[k] for k in kinds)
    return {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
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
        "bytes_per_session": round(statistics.mean(sizes)),
        "decide_rounds_per_s": [round(f.per_s) for f in rounds["decide"]],
        "echo_rounds_per_s": [round(f.per_s) for f in rounds["echo"]],
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        f"session-store benchmark: {result['requests']} requests x {result['rounds']} rounds, "
        f"{result['concurrency']} concurrent requesters (median round)",
        f"  {'':<22}{'per second':>12}{'p50 ms':>10}{'p99 ms':>10}",
        f"  {'baseline: micro echo':<22}{result['echo_per_s']:>12}{result['echo_p50_ms']:>10}"
        f"{result['echo_p99_ms']:>10}",
        f"  {'decide':<22}{result['decide_per_s']:>12}{result['decide_p50_ms']:>10}"
        f"{result['decide_p99_ms']:>10}",
        f"  {'baseline: EVALSHA':<22}{result['evalsha_per_s']:>12}{'':>10}{result['evalsha_p99_ms']:>10}",
        f"  {'commit':<22}{result['commit_per_s']:>12}{result['commit_p50_ms']:>10}"
        f"{result['commit_p99_ms']:>10}",
        f"  decide / echo throughput   {result['decide_ratio']:.3f}  (target >= 0.5)",
        f"  decide / echo p99          {result['decide_p99_ratio']:.3f}  (target <= 3)",
        f"  commit / EVALSHA           {result['commit_ratio']:.3f}  (target >= 0.5)",
        f"  Redis bytes per session    {result['bytes_per_session']}  (target <= 512)",
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="continuity-bench-") as tmp:
        stack = Stack(data_dir=Path(tmp))
        echo: subprocess.Popen[bytes] | None = None
        try:
            stack.start_servers(redis_appendonly=False)
            stack.start_service(
                "session-store", {"CONTINUITY_LOG_LEVEL": "WARNING"}, log_path=Path(tmp) / "service.log"
            )
            echo = subprocess.Popen(
                [sys.executable, "-m", "continuity.bench.echo", stack.nats_url], stdout=subprocess.PIPE
            )
            assert echo.stdout is not None
            echo.stdout.readline()  # "ready"
            stack.wait_ready()
            import uvloop

            result = uvloop.run(measure(stack.nats_url, stack.redis_url, args))
        finally:
            if echo is not None:
                echo.terminate()
                echo.wait()
            stack.stop()
    print(msgspec.json.encode(result).decode() if args.json else report(result))
    return 0
