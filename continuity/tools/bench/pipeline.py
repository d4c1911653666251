"""`continuity bench pipeline`: events per second from publish to decision, end to end through
JetStream and Redis with 1..N classifier processes (`--replicas N`), next to a baseline
measured in the same run: a plain JetStream consumer process that fetches, acknowledges and
publishes one message per event with no logic (`python -m continuity.tools.bench.pipeline NATS_URL
[STREAM_REPLICAS]`). Each replica count also gets the CPU milliseconds and system calls per
event of the classifier processes and of the baseline process (`procstat`).

Both are driven the same way: N concurrent senders, each publishing one event and waiting for
its outcome (a decision, or the baseline's message) before the next, so the latency figures are
those of a loaded but not flooded pipeline. The events get direct decisions (unclassified under
`same_session_only` → `retry_same_session`, signed refusals → `operator`): the archiver and the
reconciliation service are not in the loop.

`--production --sync-interval V` (repeatable) sets JetStream's `sync_interval` of the embedded
cluster; with two or more values, each gets a cluster of its own, measured one after another in
the same run, and the report ends with each one's figures relative to the first value's.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import nats
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from continuity.cli.examples import examples
from continuity.tools.bench.deployment import (
    SYNC_DEFAULT,
    Deployment,
    add_arguments,
    deployment,
    describe,
    machine,
    printed,
    sync_interval_value,
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
from continuity.tools.simulate.keys import DEMO_KEYS, DEMO_KEYS_ENV
from shared.contract import CommandResult, ResumeFailed, SessionRef, subjects
from shared.contract.signing import sign
from shared.contract.times import now_rfc3339
from shared.platform.bus.connection import server_list
from shared.records import keys

BASELINE_IN_STREAM = "BENCH_PIPELINE_IN"
BASELINE_OUT_STREAM = "BENCH_PIPELINE_OUT"
BASELINE_IN = "bench.pipeline.in"
BASELINE_OUT = "bench.pipeline.out"
BASELINE_DURABLE = "bench-baseline"
RUNNERS = 16
SESSIONS = 256
KEY_ID = "sim-k1"

_encode = msgspec.json.Encoder().encode


class _Outcome(msgspec.Struct):
    """What the load generator reads of an outcome: the run_id both carry (the decision's or
    the echoed event's), and a decision's action. Decoded once, into these fields only, so the
    generator's own cost stays alike for both."""

    run_id: str
    action: str | None = None


_outcome = msgspec.json.Decoder(_Outcome)


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("pipeline", help="events/s from publish to decision vs a plain JetStream consumer")
    p.add_argument("--events", type=int, default=5000, help="events per measurement (default 5000)")
    p.add_argument("--concurrency", type=int, default=256, help="events in flight (default 256)")
    # The machine's speed can move by a third within a minute: five alternating rounds give a
    # steadier median than three.
    p.add_argument("--rounds", type=int, default=5, help="rounds; the median round is reported (default 5)")
    p.add_argument("--profile", type=Path, help="record the first classifier with py-spy into this file")
    add_arguments(p)
    p.add_argument(
        "--sync-interval",
        action="append",
        type=sync_interval_value,
        metavar="always|default|DURATION",
        help="with --production: JetStream's sync_interval of the cluster; repeat it to measure "
        "each value in turn, in the same run (default: the server's own, 2m)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)
    examples(
        p,
        "continuity bench pipeline",
        "continuity bench pipeline --json",
        "continuity bench pipeline --production --sync-interval default --sync-interval always",
    )


# ---- the events ------------------------------------------------------------------------------


def session(i: int) -> SessionRef:
    return SessionRef(tenant="bench", conversation_id=f"conv-{i % SESSIONS:05d}", agent_id="codex")


def event(prefix: str, i: int) -> ResumeFailed:
    """Even: a transport drop (→ retry_same_session); odd: a signed refusal (→ operator)."""
    runner = f"bench-r{i % RUNNERS:02d}"
    run_id = f"{prefix}-{i:07d}"
    result = None
    if i % 2:
        result = CommandResult(
            command="provider.attach",
            status="refused",
            classification="provider_attach_refused",
            issued_at=now_rfc3339(),
            key_id=KEY_ID,
            signature="",
        )
        result.signature = sign(DEMO_KEYS[KEY_ID], runner, run_id, 1, result)
    return ResumeFailed(
        type="resume_failed",
        event_id=f"{run_id}.a1",
        runner_id=runner,
        run_id=run_id,
        attempt=1,
        session=session(i),
        native_session_id=f"ns-{i % SESSIONS:05d}",
        occurred_at=now_rfc3339(),
        command_result=result,
    )


async def seed_sessions(redis_url: str) -> None:
    """Session records as any release writes them (version-1 fields), policy same_session_only."""
    r = aioredis.Redis.from_url(redis_url)
    pipe = r.pipeline(transaction=False)
    for i in range(SESSIONS):
        fields = {
            "native_session_id": f"ns-{i:05d}",
            "adapter": "codex",
            "model": "gpt-5-codex",
            "cwd": f"/workspaces/bench/{i:05d}",
            "cursor": "turn-000001",
            "prompt_hash": "0" * 16,
            "checkpoint_policy": "same_session_only",
            "updated_at": now_rfc3339(),
        }
        pipe.hset(keys.session(session(i).key), mapping=fields)  # type: ignore[arg-type]
    await pipe.execute()
    await r.aclose()


# ---- the measurement -------------------------------------------------------------------------


class Outcomes:
    """Futures of the events in flight, completed when their outcome arrives."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[None]] = {}
        self.received = 0

    async def on_message(self, msg: Msg) -> _Outcome:
        outcome = _outcome.decode(msg.data)
        future = self.waiting.pop(outcome.run_id, None)
        self.received += 1
        if future is not None and not future.done():
            future.set_result(None)
        return outcome


async def follow_outcomes(
    js: JetStreamContext, on_decision: Callable[[Msg], Awaitable[None]], echoes: Outcomes
) -> None:
    """Read, from now on, every decision (to `on_decision`) and every message the baseline
    publishes (into `echoes`)."""

    async def on_echo(msg: Msg) -> None:
        await echoes.on_message(msg)

    for subject, stream, handler in (
        (subjects.DECISIONS_ALL, subjects.DECISIONS_STREAM, on_decision),
        (f"{BASELINE_OUT}.>", BASELINE_OUT_STREAM, on_echo),
    ):
        await js.subscribe(
            subject, stream=stream, cb=handler, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW
        )


async def _placement(js: JetStreamContext, stream: str) -> dict[str, int]:
    info = await js.stream_info(stream)
    servers = 1 + len(info.cluster.replicas or []) if info.cluster is not None else 1
    return {"num_replicas": info.config.num_replicas or 1, "placed_on_servers": servers}


async def _placements(js: JetStreamContext) -> dict[str, dict[str, int]]:
    """The streams' replicas as the servers have them, not as asked for."""
    return {
        "events_stream": await _placement(js, subjects.EVENTS_STREAM),
        "baseline_stream": await _placement(js, BASELINE_IN_STREAM),
    }


TARGET = 0.8
"""The pipeline's throughput goal, as a ratio to the baseline consumer's."""


def step_figures(replicas: int, rounds: dict[str, list[Figures]], first_per_s: float) -> dict[str, Any]:
    """The figures of one replica count: median rounds, and costs over all its rounds."""
    base, pipe = median(rounds["baseline"]), median(rounds["pipeline"])
    service, raw = costs(rounds["pipeline"]), costs(rounds["baseline"])
    around, base_around = costs_around(rounds["pipeline"]), costs_around(rounds["baseline"])
    bound = cpu_bound(service["cpu_ms_per_op"], around, raw["cpu_ms_per_op"], base_around, TARGET)
    return {
        "replicas": replicas,
        "events_per_s": round(pipe.per_s),
        "p50_ms": round(pipe.p50_ms, 3),
        "p99_ms": round(pipe.p99_ms, 3),
        "baseline_per_s": round(base.per_s),
        "baseline_p50_ms": round(base.p50_ms, 3),
        "baseline_p99_ms": round(base.p99_ms, 3),
        "ratio": ratio(pipe.per_s, base.per_s),
        "p99_ratio": ratio(pipe.p99_ms, base.p99_ms),
        "scaling": ratio(pipe.per_s, first_per_s or pipe.per_s),
        "cpu_ms_per_event": service["cpu_ms_per_op"],
        "writes_per_event": service["writes_per_op"],
        "reads_per_event": service["reads_per_op"],
        "baseline_cpu_ms_per_event": raw["cpu_ms_per_op"],
        "baseline_writes_per_event": raw["writes_per_op"],
        "baseline_reads_per_event": raw["reads_per_op"],
        "around_cpu_ms_per_event": around,
        "baseline_around_cpu_ms_per_event": base_around,
        "cpu_ratio": bound["cpu_ratio"],
        "cpu_budget_ms_per_event": bound["cpu_budget_ms"],
        "rounds_per_s": [round(f.per_s) for f in rounds["pipeline"]],
        "baseline_rounds_per_s": [round(f.per_s) for f in rounds["baseline"]],
    }


async def measure(d: Deployment, args: argparse.Namespace, baseline_pid: int) -> dict[str, Any]:
    nc = await nats.connect(servers=server_list(d.stack.nats_url), pending_size=64 * 1024 * 1024)
    js = nc.jetstream()
    await seed_sessions(d.stack.redis_url)
    placement = await _placements(js)
    decisions, echoes = Outcomes(), Outcomes()
    actions: Counter[str] = Counter()
    counting = False

    async def on_decision(msg: Msg) -> None:
        outcome = await decisions.on_message(msg)
        if counting:
            actions[outcome.action or "?"] += 1

    await follow_outcomes(js, on_decision, echoes)
    loop = asyncio.get_running_loop()
    rounds_done = 0

    async def one_round(kind: str, total: int) -> Figures:
        nonlocal rounds_done
        rounds_done += 1
        prefix = f"{kind}{rounds_done}"
        events = [event(prefix, i) for i in range(total)]
        payloads = [_encode(e) for e in events]
        outcomes = decisions if kind == "pipeline" else echoes
        pids = d.pids("classifier") if kind == "pipeline" else [baseline_pid]

        async def op(i: int) -> None:
            e = events[i]
            future = loop.create_future()
            outcomes.waiting[e.run_id] = future
            if kind == "pipeline":
                subject = subjects.event(e.runner_id, "resume_failed")
            else:
                subject = f"{BASELINE_IN}.{e.runner_id}"
            await js.publish(subject, payloads[i], headers={"Nats-Msg-Id": e.event_id})
            await asyncio.wait_for(future, 60)

        return await load(kind, op, total=total, concurrency=args.concurrency, pids=pids, around=d.around())

    warmup = min(1000, args.events)
    steps: list[dict[str, Any]] = []
    for replicas in range(1, args.replicas + 1):
        await d.scale_async("classifier", replicas, classifier_env())
        if replicas == 1:
            await one_round("baseline", warmup)
        await one_round("pipeline", warmup)  # a new replica warms up too
        counting = True
        rounds: dict[str, list[Figures]] = {"baseline": [], "pipeline": []}
        for _ in range(args.rounds):
            for kind in ("baseline", "pipeline"):  # alternating, so drift hits both alike
                rounds[kind].append(await one_round(kind, args.events))
        counting = False
        first = steps[0]["events_per_s"] if steps else 0.0
        steps.append(step_figures(replicas, rounds, first))
    version = nc.connected_server_version
    await nc.close()
    return result_of(args, steps, actions, placement, f"{version.major}.{version.minor}.{version.patch}")


def result_of(
    args: argparse.Namespace,
    steps: list[dict[str, Any]],
    actions: Counter[str],
    placement: dict[str, dict[str, int]],
    nats_version: str,
) -> dict[str, Any]:
    """The first replica count's figures at the top, every count's in `steps`."""
    return {
        "events": args.events,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "production": args.production,
        **{k: v for k, v in steps[0].items() if k not in ("replicas", "scaling")},
        "decisions": dict(sorted(actions.items())),
        **placement,
        "nats_version": nats_version,
        "steps": steps,
    }


def report(result: dict[str, Any]) -> str:
    decided = ", ".join(f"{a} {n}" for a, n in result["decisions"].items())
    lines = [
        f"pipeline benchmark: {result['events']} events x {result['rounds']} rounds, "
        f"{result['concurrency']} in flight (median round)",
        f"  {'':<34}{'events/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'CPU ms/event':>14}{'writes/event':>14}",
    ]
    for s in result["steps"]:
        lines += [
            f"  {'baseline: fetch, ack, publish':<34}{s['baseline_per_s']:>10}"
            f"{s['baseline_p50_ms']:>10}{s['baseline_p99_ms']:>10}"
            f"{s['baseline_cpu_ms_per_event']:>14}{s['baseline_writes_per_event']:>14}",
            f"  {'classifier x' + str(s['replicas']) + ': event → decision':<34}{s['events_per_s']:>10}"
            f"{s['p50_ms']:>10}{s['p99_ms']:>10}{s['cpu_ms_per_event']:>14}{s['writes_per_event']:>14}",
            f"  {'':<34}ratio to baseline {s['ratio']:.3f}, to 1 replica {s['scaling']:.3f}",
            f"  {'':<34}CPU ms/event elsewhere: {cost_line(s['around_cpu_ms_per_event'])}"
            f" (baseline: {cost_line(s['baseline_around_cpu_ms_per_event'])})",
            f"  {'':<34}ratio the summed CPU allows {s['cpu_ratio']:.3f}; for {TARGET} the classifier"
            f" may spend {s['cpu_budget_ms_per_event']} ms/event",
        ]
    lines += [
        f"  classifier / baseline throughput  {result['ratio']:.3f}  (1 replica; target >= {TARGET})",
        f"  decisions: {decided}",
        f"  streams as stored: events on {result['events_stream']['placed_on_servers']} server(s), "
        f"baseline on {result['baseline_stream']['placed_on_servers']}",
        "  CPU ms/event: utime+stime of the classifier processes (or the baseline process) per event",
        *describe(result),
    ]
    return "\n".join(lines)


def classifier_env(limits: bool = False) -> dict[str, str]:
    """The classifier's settings for a benchmark. Without `limits`, the event quotas and the
    storm breaker are lifted: the pipeline measures the decision path, and its runners send
    more events a second than the default quotas allow (contract 10.6)."""
    env = {"CONTINUITY_RUNNER_KEYS": DEMO_KEYS_ENV, "CONTINUITY_LOG_LEVEL": "WARNING"}
    if not limits:
        env |= {
            "CONTINUITY_RUNNER_EVENT_RATE": "1000000",
            "CONTINUITY_TENANT_EVENT_RATE": "1000000",
            "CONTINUITY_RUNNER_EVENT_BURST": "1000000",
            "CONTINUITY_TENANT_EVENT_BURST": "1000000",
            "CONTINUITY_TENANT_RECOVERY_BUDGET": "1000000000",
        }
    return env


def start_baseline(d: Deployment) -> subprocess.Popen[bytes]:
    """The baseline consumer process on the deployment's servers, once it is ready; the caller
    terminates it."""
    baseline = subprocess.Popen(
        [sys.executable, "-m", "continuity.tools.bench.pipeline", d.stack.nats_url, str(d.stream_replicas)],
        stdout=subprocess.PIPE,
    )
    assert baseline.stdout is not None
    baseline.stdout.readline()  # "ready"
    return baseline


def main(args: argparse.Namespace) -> int:
    if args.events < 1 or args.concurrency < 1 or args.rounds < 1 or args.replicas < 1:
        print("error: --events, --concurrency, --rounds and --replicas must be at least 1", file=sys.stderr)
        return 2
    if args.sync_interval and not args.production:
        print("error: --sync-interval sets the embedded cluster's: give --production too", file=sys.stderr)
        return 2
    started = machine()
    runs = [run_once(args, value) for value in args.sync_interval or [SYNC_DEFAULT]]
    if len(runs) == 1:
        return printed(runs[0], started, args.json, report)
    return printed(compared(runs), started, args.json, compared_report)


def run_once(args: argparse.Namespace, sync_interval: str) -> dict[str, Any]:
    """One deployment (its cluster's JetStream on `sync_interval` with --production) measured."""
    with (
        tempfile.TemporaryDirectory(prefix="continuity-bench-") as tmp,
        deployment(Path(tmp), args.production, sync_interval) as d,
    ):
        baseline: subprocess.Popen[bytes] | None = None
        profiler: subprocess.Popen[bytes] | None = None
        try:
            # The classifier first: it creates the streams the bench subscribes to.
            d.scale("classifier", 1, classifier_env())
            baseline = start_baseline(d)
            if args.profile is not None:
                profiler = subprocess.Popen(
                    [
                        str(Path(sys.executable).parent / "py-spy"),
                        "record",
                        "--pid",
                        str(d.pids("classifier")[0]),
                        "--format",
                        "raw",
                        "--output",
                        str(args.profile),
                        "--nonblocking",
                        "--rate",
                        "1000",
                    ],
                    stdout=subprocess.DEVNULL,
                )
            import uvloop

            result = uvloop.run(measure(d, args, baseline.pid))
        finally:
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                profiler.wait(30)
            if baseline is not None:
                baseline.terminate()
                baseline.wait()
        result["servers"] = d.facts
    return result


_COMPARED = ("events_per_s", "p50_ms", "p99_ms", "baseline_per_s", "baseline_p99_ms", "ratio")


def compared(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several sync_interval values' runs, and each one's figures divided by the first one's."""
    first = runs[0]
    return {
        "sync_intervals": [r["servers"]["nats_sync_interval"] for r in runs],
        "runs": runs,
        "relative_to_first": [{k: ratio(r[k], first[k]) for k in _COMPARED} for r in runs],
    }


def compared_report(result: dict[str, Any]) -> str:
    machine_keys = ("cores", "load_average_start", "load_average_end")
    lines: list[str] = []
    for value, run in zip(result["sync_intervals"], result["runs"], strict=True):
        lines += [f"sync_interval {value}:", report({**run, **{k: result[k] for k in machine_keys}}), ""]
    first = result["sync_intervals"][0]
    lines.append(f"relative to sync_interval {first} (same run, one after the other):")
    for value, rel in zip(result["sync_intervals"], result["relative_to_first"], strict=True):
        lines.append(
            f"  {value:<10} events/s x{rel['events_per_s']:.3f}, p50 x{rel['p50_ms']:.3f}, "
            f"p99 x{rel['p99_ms']:.3f}; baseline events/s x{rel['baseline_per_s']:.3f}, "
            f"p99 x{rel['baseline_p99_ms']:.3f}"
        )
    return "\n".join(lines)


# ---- the baseline consumer process -------------------------------------------------------------


def _stream(name: str, subject: str, replicas: int) -> StreamConfig:
    """Stored like Continuity's streams: file-backed, with the same duplicate window and
    replicas."""
    return StreamConfig(
        name=name,
        subjects=[f"{subject}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        duplicate_window=120.0,
        discard=DiscardPolicy.OLD,
    )


async def _ensure(js: JetStreamContext, config: StreamConfig) -> None:
    assert config.name is not None
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)


async def baseline_consumer(url: str, replicas: int = 1) -> None:
    """Fetch, publish one message per event, acknowledge: the classifier's loop minus its logic
    (same batch size, same ack policy, a batch's messages handled concurrently)."""
    nc: Client = await nats.connect(servers=server_list(url))
    js = nc.jetstream()
    await _ensure(js, _stream(BASELINE_IN_STREAM, BASELINE_IN, replicas))
    await _ensure(js, _stream(BASELINE_OUT_STREAM, BASELINE_OUT, replicas))
    await js.add_consumer(
        BASELINE_IN_STREAM,
        ConsumerConfig(
            durable_name=BASELINE_DURABLE,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=30,
            max_ack_pending=4096,
            num_replicas=replicas,
        ),
    )
    sub = await js.pull_subscribe_bind(BASELINE_DURABLE, BASELINE_IN_STREAM)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def handle(msg: Msg) -> None:
        runner = msg.subject.rsplit(".", 1)[-1]
        msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
        await js.publish(f"{BASELINE_OUT}.{runner}", msg.data, headers={"Nats-Msg-Id": f"out:{msg_id}"})
        await msg.ack()

    print("ready", flush=True)
    while not stop.is_set():
        try:
            msgs = await sub.fetch(64, timeout=1.0)
        except TimeoutError:
            continue
        await asyncio.gather(*(handle(m) for m in msgs))
    await sub.unsubscribe()
    await nc.close()


if __name__ == "__main__":
    import uvloop

    uvloop.run(baseline_consumer(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1))
