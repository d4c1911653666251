"""Load generation and its figures: a fixed number of requests from N concurrent workers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from continuity.tools.bench import procstat
from continuity.tools.bench.procstat import Usage


@dataclass(frozen=True)
class Figures:
    name: str
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    used: Usage = procstat.NOTHING
    """What the measured processes spent during the round (`load`'s `pids`)."""
    around: dict[str, Usage] = field(default_factory=dict)
    """What the other processes of the round spent (`load`'s `around`): the servers and the
    load generator, which every measured path shares."""

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


async def load(
    name: str,
    op: Callable[[int], Awaitable[object]],
    *,
    total: int,
    concurrency: int,
    pids: Sequence[int] = (),
    around: Mapping[str, Sequence[int]] | None = None,
) -> Figures:
    """Run `op(i)` for i in range(total) from `concurrency` workers; time each call, and take
    what the processes `pids`, and each group of `around`, spent meanwhile."""
    latencies: list[float] = []
    counter = iter(range(total))

    async def worker() -> None:
        for i in counter:
            started = time.perf_counter()
            await op(i)
            latencies.append(time.perf_counter() - started)

    groups = dict(around or {})
    before = procstat.usage(pids)
    before_around = {k: procstat.usage(v) for k, v in groups.items()}
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    used = procstat.usage(pids) - before
    spent = {k: procstat.usage(v) - before_around[k] for k, v in groups.items()}
    latencies.sort()
    return Figures(
        name,
        total,
        elapsed,
        percentile(latencies, 0.50) * 1000,
        percentile(latencies, 0.99) * 1000,
        used,
        spent,
    )


def median(rounds: Sequence[Figures]) -> Figures:
    """The round of median throughput."""
    return sorted(rounds, key=lambda f: f.per_s)[len(rounds) // 2]


def costs(rounds: Sequence[Figures], prefix: str = "") -> dict[str, float]:
    """CPU milliseconds, write and read system calls per operation, over all `rounds`."""
    ops = sum(f.requests for f in rounds)
    used = sum((f.used for f in rounds), procstat.NOTHING)
    return {
        f"{prefix}cpu_ms_per_op": procstat.per_op_ms(used, ops),
        f"{prefix}writes_per_op": procstat.per_op(used.writes, ops),
        f"{prefix}reads_per_op": procstat.per_op(used.reads, ops),
    }


def costs_around(rounds: Sequence[Figures]) -> dict[str, float]:
    """CPU milliseconds per operation of each other process group, over all `rounds`."""
    ops = sum(f.requests for f in rounds)
    names = sorted({name for f in rounds for name in f.around})
    nothing = procstat.NOTHING
    spent = {name: sum((f.around.get(name, nothing) for f in rounds), nothing) for name in names}
    return {name: procstat.per_op_ms(used, ops) for name, used in spent.items()}


def cost_line(costs: dict[str, float]) -> str:
    """`costs_around` as a report prints it."""
    return ", ".join(f"{name} {ms}" for name, ms in costs.items()) or "not measured"


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


def cpu_bound(
    service_ms: float,
    around: Mapping[str, float],
    baseline_ms: float,
    baseline_around: Mapping[str, float],
    target: float,
) -> dict[str, float]:
    """What the CPU per operation of every process allows when they all share the machine's
    cores, as on a development machine: throughput is then the cores' time over the summed CPU
    per operation, so the ratio of the sums (`cpu_ratio`, baseline over service path) is the
    throughput ratio the cores allow; and `cpu_budget_ms` is the most the measured service could
    spend per operation for the ratio to reach `target`, the other processes spending what they
    did (negative: not even a service costing nothing would). With free cores for each process
    the measured ratio can exceed `cpu_ratio`."""
    others = sum(around.values())
    baseline_total = baseline_ms + sum(baseline_around.values())
    return {
        "cpu_ratio": ratio(baseline_total, service_ms + others),
        "cpu_budget_ms": round(baseline_total / target - others, 4),
    }
