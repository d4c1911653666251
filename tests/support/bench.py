"""A `continuity bench` run as a user runs it: its own process, `--json`, the object it printed,
and the checks of its figures (positive numbers, the machine it ran on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def bench_json(kind: str, *args: str, timeout: float = 90) -> dict[str, Any]:
    """`continuity bench <kind> <args> --json`: the object printed; its stderr's tail on failure."""
    proc = subprocess.run(
        [sys.executable, "-m", "continuity", "bench", kind, *args, "--json"],
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def bench(*args: str, timeout: float = 120) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "continuity", "bench", *args, "--json"],
        capture_output=True,
        timeout=timeout,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("NATS_URL", "REDIS_URL")},
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def positive(figures: dict[str, Any], *names: str) -> None:
    for name in names:
        assert isinstance(figures[name], int | float) and figures[name] > 0, (name, figures[name])


def machine_facts(result: dict[str, Any]) -> None:
    assert result["cores"] == os.cpu_count()
    for key in ("load_average_start", "load_average_end"):
        assert len(result[key]) == 3 and all(x >= 0 for x in result[key])


def summed_cpu_allows(
    service_ms: float,
    around: dict[str, float],
    baseline_ms: float,
    baseline_around: dict[str, float],
    cpu_ratio: float,
    budget_ms: float,
    target: float,
) -> None:
    """A printed CPU-bound ratio and budget follow from the printed CPU figures (rounded)."""
    total, baseline_total = service_ms + sum(around.values()), baseline_ms + sum(baseline_around.values())
    assert total > 0, (service_ms, around)
    assert abs(cpu_ratio - baseline_total / total) < 0.01, (cpu_ratio, baseline_total / total)
    expected = baseline_total / target - sum(around.values())
    assert abs(budget_ms - expected) < 0.001, (budget_ms, expected)
