"""Load generation and its figures: a fixed number of requests from N concurrent workers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Figures:
    name: str
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


async def load(name: str, op: Callable[[int], Awaitable[object]], *, total: int, concurrency: int) -> Figures:
    """Run `op(i)` for i in range(total) from `concurrency` workers; time each call."""
    latencies: list[float] = []
    counter = iter(range(total))

    async def worker() -> None:
        for i in counter:
            started = time.perf_counter()
            await op(i)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return Figures(
        name, total, elapsed, percentile(latencies, 0.50) * 1000, percentile(latencies, 0.99) * 1000
    )


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0
