"""`continuity bench quotas`: the event rate one runner is accepted at while it floods the
classifier above its quota, with one replica and with several sharing the quota (contract 10.6),
in the same run.

Each round starts the classifier replicas (`continuity serve classifier` processes on the same
NATS and Redis), then a runner of its own publishes `--flood-rate` events a second for
`--seconds`, paced, each a new run. Every event ends as a decision or a `quota_exceeded`
refusal on the runner's decisions subject; the accepted rate is the decisions past the burst
over the time the classifier took to handle the flood (from the first outcome to the last, by
their `decided_at` / `refused_at`), and the ratio is that over the configured rate (the goal:
1.0 ± 0.10 whatever the replicas). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from continuity.cli.examples import examples
from continuity.tools.bench.deployment import Deployment, deployment, describe, machine, printed
from continuity.tools.bench.pipeline import classifier_env
from shared.contract import ResumeFailed, SessionRef, subjects
from shared.contract.times import now_rfc3339
from shared.platform.bus.connection import server_list

GOAL = 0.10
"""The accepted rate within 10% of the configured one."""
IN_FLIGHT = 64
"""Publications awaiting their acknowledgement at once."""
_encode = msgspec.json.Encoder().encode


class _Outcome(msgspec.Struct):
    type: str
    run_id: str
    decided_at: str | None = None
    refused_at: str | None = None
    code: str | None = None


_outcome = msgspec.json.Decoder(_Outcome)


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser(
        "quotas", help="a flooding runner's accepted event rate, with 1 and N classifier replicas"
    )
    p.add_argument(
        "--rate", type=float, default=100.0, help="the runner's event rate, a second (default 100)"
    )
    p.add_argument("--burst", type=int, default=20, help="the runner's burst (default 20)")
    p.add_argument(
        "--flood-rate", type=float, default=300.0, help="events a second the runner publishes (default 300)"
    )
    p.add_argument("--seconds", type=float, default=10.0, help="how long it floods, per round (default 10)")
    p.add_argument(
        "--replicas", type=int, default=3, help="classifier replicas of the second round (default 3)"
    )
    p.add_argument("--production", action="store_true", help="3-node JetStream cluster, Redis with AOF")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)
    examples(p, "continuity bench quotas", "continuity bench quotas --rate 200 --flood-rate 800 --json")


def _event(runner: str, i: int) -> ResumeFailed:
    run_id = f"{runner}-{i:07d}"
    return ResumeFailed(
        type="resume_failed",
        event_id=f"{run_id}.a1",
        runner_id=runner,
        run_id=run_id,
        attempt=1,
        session=SessionRef(tenant="bench-quotas", conversation_id=f"conv-{i:07d}", agent_id="codex"),
        native_session_id=f"ns-{i:07d}",
        occurred_at=now_rfc3339(),
    )


def _seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


async def _flood(nc: Client, runner: str, args: argparse.Namespace) -> tuple[int, float]:
    """The runner's events, published at `--flood-rate` for `--seconds`: how many, and the
    seconds the publishing took."""
    js = nc.jetstream()
    count = int(args.flood_rate * args.seconds)
    slots = asyncio.Semaphore(IN_FLIGHT)
    started = time.perf_counter()

    async def one(i: int) -> None:
        e = _event(runner, i)
        try:
            await js.publish(
                subjects.event(runner, "resume_failed"), _encode(e), headers={"Nats-Msg-Id": e.event_id}
            )
        finally:
            slots.release()

    tasks = []
    for i in range(count):
        delay = started + i / args.flood_rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)  # paced: the flood's rate, not the bus's
        await slots.acquire()
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return count, time.perf_counter() - started


async def _round(nats_url: str, runner: str, replicas: int, args: argparse.Namespace) -> dict[str, Any]:
    nc = await nats.connect(servers=server_list(nats_url), pending_size=64 * 1024 * 1024)
    accepted: list[float] = []
    refused: list[float] = []
    done = asyncio.Event()
    expected = int(args.flood_rate * args.seconds)

    async def on_outcome(msg: Msg) -> None:
        outcome = _outcome.decode(msg.data)
        if outcome.type == "refusal" and outcome.refused_at is not None:
            refused.append(_seconds(outcome.refused_at))
        elif outcome.decided_at is not None:
            accepted.append(_seconds(outcome.decided_at))
        if len(accepted) + len(refused) >= expected:
            done.set()

    js = nc.jetstream()
    await js.subscribe(
        subjects.decisions(runner),
        stream=subjects.DECISIONS_STREAM,
        cb=on_outcome,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.NEW,
    )
    version = nc.connected_server_version
    published, publish_s = await _flood(nc, runner, args)
    try:
        await asyncio.wait_for(done.wait(), 120 + args.seconds)
    except TimeoutError:
        print(f"not every outcome came within the deadline ({len(accepted) + len(refused)})", file=sys.stderr)
    await nc.close()
    times = accepted + refused
    handled_s = (max(times) - min(times)) if len(times) > 1 else 0.0
    rate = (len(accepted) - args.burst) / handled_s if handled_s > 0 else 0.0
    return {
        "replicas": replicas,
        "published": published,
        "publish_s": round(publish_s, 3),
        "offered_per_s": round(published / publish_s, 1) if publish_s else 0.0,
        "accepted": len(accepted),
        "refused": len(refused),
        "handled_s": round(handled_s, 3),
        "accepted_per_s": round(rate, 2),
        "configured_per_s": args.rate,
        "ratio": round(rate / args.rate, 4),
        "goal_met": abs(rate / args.rate - 1.0) <= GOAL,
        "nats_version": f"{version.major}.{version.minor}.{version.patch}",
    }


async def measure(d: Deployment, env: dict[str, str], args: argparse.Namespace) -> list[dict[str, Any]]:
    rounds = []
    for replicas in (1, args.replicas):
        await d.scale_async("classifier", replicas, env)
        # A runner of its own per round: its bucket starts full, as the burst above assumes.
        rounds.append(await _round(d.stack.nats_url, f"bench-quota-{replicas}r", replicas, args))
    for r in rounds[1:]:
        r.pop("nats_version")
    return rounds


def report(result: dict[str, Any]) -> str:
    lines = [
        f"quotas benchmark: one runner publishing {result['flood_rate']:g} events/s "
        f"for {result['seconds']:g} s against its rate of {result['rate']:g}/s "
        f"(burst {result['burst']}), a runner of its own per round",
        f"  {'replicas':<10}{'offered/s':>11}{'accepted':>10}{'refused':>9}{'handled s':>11}"
        f"{'accepted/s':>12}{'configured/s':>14}{'ratio':>8}",
    ]
    for r in result["rounds"]:
        lines.append(
            f"  {r['replicas']:<10}{r['offered_per_s']:>11}{r['accepted']:>10}{r['refused']:>9}"
            f"{r['handled_s']:>11}{r['accepted_per_s']:>12}{r['configured_per_s']:>14g}{r['ratio']:>8.3f}"
        )
    met = all(r["goal_met"] for r in result["rounds"])
    lines += [
        "  accepted/s = (accepted - burst) / handled s, from the first outcome to the last",
        f"  goal: ratio 1.0 +/- {GOAL:.2f} with any number of replicas: {'met' if met else 'NOT met'}",
        *describe(result),
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if (
        args.rate <= 0
        or args.flood_rate <= args.rate
        or args.seconds <= 0
        or args.burst < 1
        or args.replicas < 1
    ):
        print(
            "error: needs --rate > 0, --flood-rate above it, --seconds > 0, --burst and --replicas >= 1",
            file=sys.stderr,
        )
        return 2
    started = machine()
    env = classifier_env(limits=True)
    env |= {
        "CONTINUITY_RUNNER_EVENT_RATE": repr(args.rate),
        "CONTINUITY_RUNNER_EVENT_BURST": str(args.burst),
        # Only the runner's own quota is measured.
        "CONTINUITY_TENANT_EVENT_RATE": "1000000",
        "CONTINUITY_TENANT_EVENT_BURST": "1000000",
        "CONTINUITY_TENANT_RECOVERY_BUDGET": "1000000000",
        "CONTINUITY_STREAM_MESSAGES_PER_RUNNER": str(int(args.flood_rate * args.seconds) * 2 + 1000),
    }
    with (
        tempfile.TemporaryDirectory(prefix="continuity-bench-") as tmp,
        deployment(Path(tmp), args.production) as d,
    ):
        import uvloop

        rounds = uvloop.run(measure(d, env, args))
        result: dict[str, Any] = {"servers": d.facts}
    result |= {
        "rounds": rounds,
        "nats_version": rounds[0].pop("nats_version"),
        "rate": args.rate,
        "burst": args.burst,
        "flood_rate": args.flood_rate,
        "seconds": args.seconds,
        "production": args.production,
    }
    return printed(result, started, args.json, report)
