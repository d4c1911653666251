"""`continuity bench tenancy`: fairness and the session-store's decide with many runners issued
and many sessions committed, as a buyer runs them.

On servers of its own, with tenancy enforced: `--runners` runners are issued in the runner
directory (`runners.put`, as `continuity runners add` issues them) across `--tenants` tenants, and
`--sessions` sessions are committed by them through their own subjects, as runners leave them.
Then, in the same run:

- fairness: `bench fairness`'s measurement (a quiet runner's decision latency alone and during a
  noisy runner's flood), its two runners among the ones issued;
- decide next to the NATS micro echo baseline, each round on a session-store replica started
  anew: once with its directory cache cold (each decide by a runner the replica has not seen
  yet), then warm (the same runners again, within `CONTINUITY_RUNNER_CACHE_S`).

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client

from continuity.cli.examples import examples
from continuity.tools.bench import fairness
from continuity.tools.bench.deployment import (
    Deployment,
    add_production_argument,
    deployment,
    describe,
    machine,
    printed,
)
from continuity.tools.bench.pipeline import session as fairness_session
from continuity.tools.bench.sessions import SERVICE_ENV, commit_request, decide_request
from continuity.tools.bench.stats import Figures, costs, load, median, ratio
from shared.contract import CommitRequest, DecideRequest, SessionRef, subjects
from shared.contract.client import ContinuityClient, RunnerSessions
from shared.contract.tenancy import RunnerPutRequest
from shared.platform.bus.connection import server_list

CACHE_S = 30.0
"""The session-store's CONTINUITY_RUNNER_CACHE_S here (2 s shipped): long enough that the warm
pass meets every runner's record still cached on a slow machine; a hit costs the same either way."""
WARMUP_RUNNERS = 32
"""Runners (at most) whose decides warm a new replica's connections up, never measured."""
ECHO_SUBJECT = "continuity.bench.echo"
PASSES = ("echo", "cold", "warm")
Op = Callable[[int], Awaitable[object]]


class _Mode(msgspec.Struct):
    mode: str


_mode = msgspec.json.Decoder(_Mode)


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser(
        "tenancy", help="fairness and decide (directory cache cold and warm) with many runners issued"
    )
    p.add_argument("--runners", type=int, default=1000, help="runners issued (default 1000)")
    p.add_argument("--tenants", type=int, default=5, help="tenants the runners are spread over (default 5)")
    p.add_argument("--sessions", type=int, default=10000, help="sessions committed (default 10000)")
    fairness.add_flood_arguments(p)
    p.add_argument(
        "--requests",
        type=int,
        default=0,
        help="decides per pass, each by a runner of its own (default 0: one by every runner that "
        "does not warm the replica up)",
    )
    p.add_argument("--concurrency", type=int, default=64, help="concurrent requesters (default 64)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each on a new replica (default 5)")
    add_production_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main, unfair=False)
    examples(
        p,
        "continuity bench tenancy",
        "continuity bench tenancy --runners 200 --sessions 1000 --flood 2000 --json",
    )


class Population:
    """Who is issued and what they committed: runner 0 is the quiet runner and runner 1 the noisy
    one (tenant `bench`, `bench fairness`'s sessions); then the warm-up runners, then the measured
    ones. Session j belongs to runner 2 + j % (runners - 2), in that runner's tenant."""

    def __init__(self, runners: int, tenants: int, sessions: int) -> None:
        self.ids = [fairness.QUIET, fairness.NOISY] + [f"bench-runner-{i:05d}" for i in range(2, runners)]
        bench = fairness_session(0).tenant
        self.tenants = [bench] + [f"tenant-{t:02d}" for t in range(1, tenants)]
        self.sessions = sessions
        self.warmup = list(range(2, 2 + min(WARMUP_RUNNERS, max(1, (runners - 2) // 10))))
        self.measured = list(range(self.warmup[-1] + 1, runners))

    def tenant(self, runner: int) -> str:
        return self.tenants[0] if runner < 2 else self.tenants[runner % len(self.tenants)]

    def owner(self, j: int) -> int:
        return 2 + j % (len(self.ids) - 2)

    def session(self, j: int) -> SessionRef:
        tenant = self.tenant(self.owner(j))
        return SessionRef(tenant=tenant, conversation_id=f"conv-{j:08d}", agent_id="codex-main")

    def put(self, runner: int) -> RunnerPutRequest:
        return RunnerPutRequest(runner_id=self.ids[runner], tenants=[self.tenant(runner)], actor="bench")

    def commit(self, j: int) -> CommitRequest:
        return msgspec.structs.replace(commit_request(j), session=self.session(j))

    def decide(self, runner: int) -> tuple[str, bytes]:
        """The runner's decide subject and a decide on its first session."""
        req: DecideRequest = msgspec.structs.replace(
            decide_request(runner - 2), session=self.session(runner - 2)
        )
        return subjects.runner_sessions(self.ids[runner], "decide"), msgspec.json.encode(req)


async def populate(client: ContinuityClient, people: Population, args: argparse.Namespace) -> dict[str, Any]:
    """Issue every runner, then commit every session by its owner through its own subject."""
    puts = await load(
        "register", lambda i: client.runner_put(people.put(i)), total=len(people.ids), concurrency=32
    )

    async def commit(j: int) -> object:
        return await RunnerSessions(client, people.ids[people.owner(j)]).commit(people.commit(j))

    commits = await load("commit", commit, total=people.sessions, concurrency=args.concurrency)
    return {
        "register_s": round(puts.seconds, 3),
        "register_per_s": round(puts.per_s),
        "commit_s": round(commits.seconds, 3),
        "commit_per_s": round(commits.per_s),
    }


def _decide(nc: Client, pairs: list[tuple[str, bytes]], counted: Counter[str]) -> Op:
    """Decide i by the runner of pairs[i]; each reply's mode counted."""

    async def op(i: int) -> object:
        subject, payload = pairs[i % len(pairs)]
        reply = await nc.request(subject, payload, timeout=30)
        if reply.headers:
            raise RuntimeError(f"decide failed during the benchmark: {reply.headers}")
        counted[_mode.decode(reply.data).mode] += 1
        return reply

    return op


async def decide_rounds(
    d: Deployment,
    nc: Client,
    people: Population,
    args: argparse.Namespace,
    env: dict[str, str],
    echo_pid: int,
) -> dict[str, Any]:
    """`--rounds` rounds on a new session-store replica each: echo, decides by runners it has
    not seen (cold), the same decides again (warm)."""
    requests = [people.decide(r) for r in people.measured[: args.requests or len(people.measured)]]
    modes: dict[str, Counter[str]] = {"cold": Counter(), "warm": Counter(), "warmup": Counter()}

    async def echo(i: int) -> object:
        return await nc.request(ECHO_SUBJECT, requests[0][1], timeout=30)

    ops = {
        "echo": echo,
        "cold": _decide(nc, requests, modes["cold"]),
        "warm": _decide(nc, requests, modes["warm"]),
    }
    warm_up = _decide(nc, [people.decide(r) for r in people.warmup], modes["warmup"])
    rounds: dict[str, list[Figures]] = {k: [] for k in PASSES}
    within = True
    total, concurrency = len(requests), args.concurrency
    for _ in range(args.rounds):
        await d.replace_async("session-store", env)  # a new replica: its directory cache is empty
        service = d.pids("session-store")
        # Connections, pools and the replica's code paths warmed up by runners never measured.
        await load("warmup", echo, total=max(200, total), concurrency=concurrency)
        await load("warmup", warm_up, total=max(200, total), concurrency=concurrency)
        rounds["echo"].append(await load("echo", echo, total=total, concurrency=concurrency, pids=[echo_pid]))
        cold_started = time.monotonic()
        for name in ("cold", "warm"):
            rounds[name].append(
                await load(name, ops[name], total=total, concurrency=concurrency, pids=service)
            )
        within = within and time.monotonic() - cold_started < CACHE_S
    return figures(rounds, modes, total, within, args)


def figures(
    rounds: dict[str, list[Figures]],
    modes: dict[str, Counter[str]],
    requests: int,
    within: bool,
    args: argparse.Namespace,
) -> dict[str, Any]:
    echo, cold, warm = (median(rounds[k]) for k in PASSES)
    result: dict[str, Any] = {
        "requests": requests,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "runner_cache_s": CACHE_S,
        "warm_within_cache": within,
    }
    for name, f in (("echo", echo), ("cold", cold), ("warm", warm)):
        spent = costs(rounds[name])
        result |= {
            f"{name}_per_s": round(f.per_s),
            f"{name}_p50_ms": round(f.p50_ms, 3),
            f"{name}_p99_ms": round(f.p99_ms, 3),
            f"{name}_cpu_ms_per_request": spent["cpu_ms_per_op"],
            f"{name}_rounds_per_s": [round(r.per_s) for r in rounds[name]],
        }
    return result | {
        "cold_ratio": ratio(cold.per_s, echo.per_s),
        "warm_ratio": ratio(warm.per_s, echo.per_s),
        "cold_p99_ratio": ratio(cold.p99_ms, echo.p99_ms),
        "warm_p99_ratio": ratio(warm.p99_ms, echo.p99_ms),
        "cold_over_warm": ratio(cold.per_s, warm.per_s),
        "cold_modes": dict(sorted(modes["cold"].items())),
        "warm_modes": dict(sorted(modes["warm"].items())),
    }


async def measure(
    d: Deployment, args: argparse.Namespace, env: dict[str, str], echo_pid: int
) -> dict[str, Any]:
    people = Population(args.runners, args.tenants, args.sessions)
    nc = await nats.connect(servers=server_list(d.stack.nats_url))
    try:
        seeded = await populate(ContinuityClient(nc, timeout=30), people, args)
        fair = await fairness.measure(d.stack.nats_url, d.stack.redis_url, args)
        decides = await decide_rounds(d, nc, people, args, env, echo_pid)
    finally:
        await nc.close()
    return {
        "runners": args.runners,
        "tenants": args.tenants,
        "sessions": args.sessions,
        **seeded,
        "fairness": {k: v for k, v in fair.items() if k not in ("nats_version", "unfair")},
        "decide": decides,
        "nats_version": fair["nats_version"],
        "production": args.production,
    }


def report(result: dict[str, Any]) -> str:
    f, c = result["fairness"], result["decide"]
    a, q = f["quiet_alone"], f["quiet_during_flood"]
    head = f"  {'':<28}{'events':>8}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}{'max ms':>10}"
    row = "  {:<28}{count:>8}{p50_ms:>10}{p95_ms:>10}{p99_ms:>10}{max_ms:>10}"
    lines = [
        f"tenancy benchmark: {result['runners']} runners issued in {result['tenants']} tenants, "
        f"{result['sessions']} sessions committed by them (tenancy enforced)",
        f"  issued in {result['register_s']} s ({result['register_per_s']}/s); sessions committed in "
        f"{result['commit_s']} s ({result['commit_per_s']}/s)",
        f"  fairness: a quiet runner's events one at a time, alone and during a flood of "
        f"{f['flood_events']} events from another runner of its tenant",
        head,
        row.format("quiet runner alone", **a),
        row.format("quiet runner, flood", **q),
        f"  p95 during / alone {f['p95_ratio']:.3f}; target: p95 during <= 2 x alone + 100 ms = "
        f"{f['target_p95_ms']} ms: {'met' if f['target_met'] else 'NOT met'}",
        f"  flood: published in {f['flood_publish_s']} s ({f['flood_publish_per_s']} events/s); its "
        f"decisions: {', '.join(f'{k} {v}' for k, v in f['flood_decisions'].items()) or 'none'}",
        f"  decide next to the micro echo: {c['requests']} decides per pass, each by a runner of its own, "
        f"{c['concurrency']} concurrent, {c['rounds']} round(s) on a new replica each (median round)",
        f"  {'':<28}{'per second':>12}{'p50 ms':>10}{'p99 ms':>10}{'CPU ms/req':>12}",
    ]
    for name, label in (
        ("echo", "baseline: micro echo"),
        ("cold", "decide, cache cold"),
        ("warm", "decide, cache warm"),
    ):
        lines.append(
            f"  {label:<28}{c[f'{name}_per_s']:>12}{c[f'{name}_p50_ms']:>10}{c[f'{name}_p99_ms']:>10}"
            f"{c[f'{name}_cpu_ms_per_request']:>12}"
        )
    lines += [
        f"  decide / echo throughput: cold {c['cold_ratio']:.3f}, warm {c['warm_ratio']:.3f}; p99: cold "
        f"{c['cold_p99_ratio']:.3f}, warm {c['warm_p99_ratio']:.3f}; cold / warm {c['cold_over_warm']:.3f}",
        f"  decisions: cold {_modes(c['cold_modes'])}; warm {_modes(c['warm_modes'])}; runner cache "
        f"{c['runner_cache_s']:g} s, warm pass within it: {'yes' if c['warm_within_cache'] else 'NO'}",
        *describe(result),
    ]
    return "\n".join(lines)


def _modes(modes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in modes.items()) or "none"


def _invalid(args: argparse.Namespace) -> str:
    """What is wrong with the options, or ''."""
    counts = (
        args.tenants,
        args.quiet_events,
        args.flood,
        args.flood_in_flight,
        args.concurrency,
        args.rounds,
    )
    if min(counts) < 1:
        return (
            "--tenants, --quiet-events, --flood, --flood-in-flight, --concurrency and --rounds "
            "must be at least 1"
        )
    if args.runners < 4:
        return "--runners must be at least 4 (the quiet and the noisy runner, one to warm up, one measured)"
    if args.sessions < args.runners - 2:
        return "--sessions must be at least --runners - 2: every runner but the quiet and noisy one owns one"
    measured = len(Population(args.runners, args.tenants, args.sessions).measured)
    if not 0 <= args.requests <= measured:
        return f"--requests must be 0 to {measured}: each decide of a pass is by a runner of its own"
    return ""


@contextlib.contextmanager
def echo_process(nats_url: str) -> Iterator[int]:
    """The micro echo baseline as its own process, once ready; its pid."""
    echo = subprocess.Popen(
        [sys.executable, "-m", "continuity.tools.bench.echo", nats_url], stdout=subprocess.PIPE
    )
    try:
        assert echo.stdout is not None
        echo.stdout.readline()  # "ready"
        yield echo.pid
    finally:
        echo.terminate()
        echo.wait()


def main(args: argparse.Namespace) -> int:
    invalid = _invalid(args)
    if invalid:
        print(f"error: {invalid}", file=sys.stderr)
        return 2
    started = machine()
    classifier = fairness.classifier_settings(args) | {"CONTINUITY_TENANCY": "enforced"}
    store = SERVICE_ENV | {
        "CONTINUITY_RUNNER_CACHE_S": f"{CACHE_S:g}",
        # The streams' bounds as the classifier, started first, created them.
        "CONTINUITY_STREAM_MESSAGES_PER_RUNNER": classifier["CONTINUITY_STREAM_MESSAGES_PER_RUNNER"],
    }
    with (
        tempfile.TemporaryDirectory(prefix="continuity-bench-") as tmp,
        deployment(Path(tmp), args.production) as d,
        echo_process(d.stack.nats_url) as echo_pid,
    ):
        d.scale("classifier", 1, classifier)
        d.scale("session-store", 1, store)
        import uvloop

        result = uvloop.run(measure(d, args, store, echo_pid))
        result["servers"] = d.facts
    return printed(result, started, args.json, report)
