"""`continuity bench fairness`: a quiet runner's decision latency alone, and during another
runner's flood, in the same run.

The quiet runner sends one event at a time and waits for its decision (a transport drop under
`same_session_only`: `retry_same_session`). First alone; then while a noisy runner publishes
`--flood` events as fast as JetStream takes them (`--flood-in-flight` publications awaiting
their acknowledgement, never their decisions), so a backlog of the noisy runner's events builds
ahead of the quiet one's in the stream. The report prints both latency distributions, the ratio
of the p95s and the target: the quiet runner's p95 during the flood at most twice its p95 alone
plus 100 ms. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import ServerVersion
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerInfo, DeliverPolicy

from continuity.cli.examples import examples
from continuity.tools.bench.deployment import deployment, describe, machine, printed
from continuity.tools.bench.pipeline import classifier_env, seed_sessions, session
from continuity.tools.bench.stats import percentile
from shared.contract import ResumeFailed, subjects
from shared.contract.times import now_rfc3339
from shared.platform.bus.connection import server_list

QUIET = "bench-quiet"
NOISY = "bench-noisy"
_encode = msgspec.json.Encoder().encode


class _Outcome(msgspec.Struct):
    run_id: str
    runner_id: str = ""
    action: str | None = None
    reason: str | None = None
    code: str | None = None
    """A refusal's code (contract 10.5): the flood's events past its quota."""


_outcome = msgspec.json.Decoder(_Outcome)


def add_flood_arguments(p: argparse.ArgumentParser) -> None:
    """The quiet runner's events and the noisy runner's flood (shared with `bench tenancy`)."""
    p.add_argument(
        "--quiet-events", type=int, default=300, help="the quiet runner's events per phase (default 300)"
    )
    p.add_argument("--flood", type=int, default=5000, help="the noisy runner's events (default 5000)")
    p.add_argument(
        "--flood-in-flight", type=int, default=64, help="publications of the flood in flight (default 64)"
    )


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser(
        "fairness", help="a quiet runner's decision latency alone and during another's flood"
    )
    add_flood_arguments(p)
    p.add_argument(
        "--unfair",
        action="store_true",
        help="the classifier without runner shares or event quotas (CONTINUITY_RUNNER_IN_FLIGHT = "
        "CONTINUITY_CONSUMER_IN_FLIGHT, rates lifted), for comparison",
    )
    p.add_argument("--production", action="store_true", help="3-node JetStream cluster, Redis with AOF")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main, replicas=1)
    examples(p, "continuity bench fairness", "continuity bench fairness --unfair --json")


def _event(runner: str, n: int, i: int) -> ResumeFailed:
    run_id = f"{runner}-{n}-{i:07d}"
    return ResumeFailed(
        type="resume_failed",
        event_id=f"{run_id}.a1",
        runner_id=runner,
        run_id=run_id,
        attempt=1,
        session=session(i),
        native_session_id=f"ns-{i % 256:05d}",
        occurred_at=now_rfc3339(),
    )


def _summary(latencies_s: list[float]) -> dict[str, float]:
    ordered = sorted(latencies_s)
    return {
        "count": len(ordered),
        "p50_ms": round(percentile(ordered, 0.50) * 1000, 2),
        "p95_ms": round(percentile(ordered, 0.95) * 1000, 2),
        "p99_ms": round(percentile(ordered, 0.99) * 1000, 2),
        "max_ms": round((ordered[-1] if ordered else 0.0) * 1000, 2),
    }


class _Quiet:
    """The quiet runner: one event at a time, each waited for until its decision comes."""

    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self.waiting: dict[str, asyncio.Future[None]] = {}
        self.phase = 0

    async def on_decision(self, msg: Msg) -> None:
        future = self.waiting.pop(_outcome.decode(msg.data).run_id, None)
        if future is not None and not future.done():
            future.set_result(None)

    async def run(self, count: int, stop: asyncio.Event | None = None) -> list[float]:
        """Each event's seconds from publication to decision, until `count` or `stop`."""
        self.phase += 1
        loop = asyncio.get_running_loop()
        latencies: list[float] = []
        for i in range(count):
            if stop is not None and stop.is_set():
                break
            e = _event(QUIET, self.phase, i)
            future = loop.create_future()
            self.waiting[e.run_id] = future
            started = time.perf_counter()
            await self.js.publish(
                subjects.event(QUIET, "resume_failed"), _encode(e), headers={"Nats-Msg-Id": e.event_id}
            )
            await asyncio.wait_for(future, 120)
            latencies.append(time.perf_counter() - started)
        return latencies


async def _flood(noisy_js: JetStreamContext, args: argparse.Namespace) -> float:
    """The noisy runner's events published, `--flood-in-flight` awaiting their acknowledgement;
    the seconds it took."""
    events = iter(range(args.flood))
    started = time.perf_counter()

    async def publisher() -> None:
        for i in events:
            e = _event(NOISY, 0, i)
            await noisy_js.publish(
                subjects.event(NOISY, "resume_failed"), _encode(e), headers={"Nats-Msg-Id": e.event_id}
            )

    await asyncio.gather(*(publisher() for _ in range(args.flood_in_flight)))
    return time.perf_counter() - started


def _result(
    args: argparse.Namespace,
    alone: list[float],
    during: list[float],
    publish_s: float,
    noisy: Counter[str],
    info: ConsumerInfo,
    version: ServerVersion,
) -> dict[str, Any]:
    a, d = _summary(alone), _summary(during)
    target_ms = round(2 * a["p95_ms"] + 100, 2)
    return {
        "quiet_alone": a,
        "quiet_during_flood": d,
        "p95_ratio": round(d["p95_ms"] / a["p95_ms"], 3) if a["p95_ms"] else 0.0,
        "target_p95_ms": target_ms,
        "target_met": d["p95_ms"] <= target_ms,
        "flood_events": args.flood,
        "flood_publish_s": round(publish_s, 3),
        "flood_publish_per_s": round(args.flood / publish_s) if publish_s else 0,
        "flood_decisions": dict(sorted(noisy.items())),
        "classifier_pending_after": (info.num_pending or 0) + (info.num_ack_pending or 0),
        "unfair": args.unfair,
        "nats_version": f"{version.major}.{version.minor}.{version.patch}",
    }


async def measure(nats_url: str, redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    # Each runner on a connection of its own, reading only its own decisions, as runners do:
    # the flood's publications and decisions queue on its connection, not the quiet one's.
    quiet_nc = await nats.connect(servers=server_list(nats_url))
    noisy_nc = await nats.connect(servers=server_list(nats_url), pending_size=64 * 1024 * 1024)
    quiet_js, noisy_js = quiet_nc.jetstream(), noisy_nc.jetstream()
    await seed_sessions(redis_url)
    quiet = _Quiet(quiet_js)
    noisy: Counter[str] = Counter()
    flood_decided = asyncio.Event()

    async def on_noisy(msg: Msg) -> None:
        outcome = _outcome.decode(msg.data)
        noisy[outcome.action or f"refused {outcome.code}"] += 1
        if sum(noisy.values()) >= args.flood:
            flood_decided.set()

    for js, runner, cb in ((quiet_js, QUIET, quiet.on_decision), (noisy_js, NOISY, on_noisy)):
        await js.subscribe(
            subjects.decisions(runner),
            stream=subjects.DECISIONS_STREAM,
            cb=cb,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
        )
    await quiet.run(min(50, args.quiet_events))  # warm up
    alone = await quiet.run(args.quiet_events)
    flood_task = asyncio.create_task(_flood(noisy_js, args))
    # The quiet runner goes on while the flood is published and while its backlog is decided.
    during = await quiet.run(args.quiet_events, stop=flood_decided)
    publish_s = await flood_task
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(flood_decided.wait(), 300)
    info = await quiet_js.consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
    version = quiet_nc.connected_server_version
    await quiet_nc.close()
    await noisy_nc.close()
    return _result(args, alone, during, publish_s, noisy, info, version)


def report(result: dict[str, Any]) -> str:
    a, d = result["quiet_alone"], result["quiet_during_flood"]
    lines = [
        f"fairness benchmark: a quiet runner's events one at a time, alone and during a flood of "
        f"{result['flood_events']} events from another runner"
        + (" (classifier without runner shares)" if result["unfair"] else ""),
        f"  {'':<28}{'events':>8}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}{'max ms':>10}",
        f"  {'quiet runner alone':<28}{a['count']:>8}{a['p50_ms']:>10}{a['p95_ms']:>10}{a['p99_ms']:>10}"
        f"{a['max_ms']:>10}",
        f"  {'quiet runner, flood':<28}{d['count']:>8}{d['p50_ms']:>10}{d['p95_ms']:>10}{d['p99_ms']:>10}"
        f"{d['max_ms']:>10}",
        f"  p95 during / alone {result['p95_ratio']:.3f}; target: p95 during <= 2 x alone + 100 ms = "
        f"{result['target_p95_ms']} ms: {'met' if result['target_met'] else 'NOT met'}",
        f"  flood: published in {result['flood_publish_s']} s ({result['flood_publish_per_s']} events/s); "
        f"its decisions: {', '.join(f'{k} {v}' for k, v in result['flood_decisions'].items()) or 'none'}",
        *describe(result),
    ]
    return "\n".join(lines)


def classifier_settings(args: argparse.Namespace) -> dict[str, str]:
    """The classifier's settings for the measurement (`--flood`, `--quiet-events`, `--unfair`)."""
    # The shipped limits: the flood meets its runner's event quota, as it would in production.
    env = classifier_env(limits=True)
    env["CONTINUITY_TENANT_RECOVERY_BUDGET"] = "1000000000"  # both runners share one tenant
    # Every event of the flood is waited for: none may leave the events stream before the
    # classifier took it (the classifier, started first, creates the streams with this).
    env["CONTINUITY_STREAM_MESSAGES_PER_RUNNER"] = str(max(args.flood, args.quiet_events) * 2)
    if args.unfair:
        env |= {"CONTINUITY_RUNNER_IN_FLIGHT": "256", "CONTINUITY_RUNNER_EVENT_RATE": "1000000"}
        env |= {"CONTINUITY_RUNNER_EVENT_BURST": "1000000"}
    return env


def main(args: argparse.Namespace) -> int:
    if min(args.quiet_events, args.flood, args.flood_in_flight) < 1:
        print("error: --quiet-events, --flood and --flood-in-flight must be at least 1", file=sys.stderr)
        return 2
    started = machine()
    env = classifier_settings(args)
    with (
        tempfile.TemporaryDirectory(prefix="continuity-bench-") as tmp,
        deployment(Path(tmp), args.production) as d,
    ):
        d.scale("classifier", 1, env)
        import uvloop

        result = uvloop.run(measure(d.stack.nats_url, d.stack.redis_url, args))
        result["servers"] = d.facts
    result["production"] = args.production
    return printed(result, started, args.json, report)
