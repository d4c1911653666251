"""What the summed CPU per operation allows on shared cores (`stats.cpu_bound`), the figure the
pipeline and sessions benches print next to their measured ratios."""

from __future__ import annotations

import pytest

from continuity.tools.bench.stats import cpu_bound


def test_the_ratio_is_the_baselines_summed_cpu_over_the_service_paths() -> None:
    # A service path costing twice the baseline's total allows half its throughput.
    bound = cpu_bound(0.3, {"nats": 0.1, "redis": 0.1}, 0.1, {"nats": 0.1, "redis": 0.0}, 0.8)
    assert bound["cpu_ratio"] == 0.4


def test_the_budget_is_what_the_service_may_spend_for_the_target() -> None:
    # Baseline 0.4 ms in all; for 0.8 the path may take 0.5 ms, of which the others take 0.2.
    bound = cpu_bound(0.6, {"nats": 0.1, "redis": 0.1}, 0.2, {"nats": 0.2}, 0.8)
    assert bound["cpu_budget_ms"] == pytest.approx(0.3)
    # Spending exactly the budget reaches the target.
    assert cpu_bound(0.3, {"nats": 0.1, "redis": 0.1}, 0.2, {"nats": 0.2}, 0.8)["cpu_ratio"] == 0.8


def test_a_target_out_of_reach_gives_a_negative_budget() -> None:
    # The other processes alone already spend more than the target allows.
    bound = cpu_bound(0.1, {"redis": 0.5}, 0.1, {}, 0.9)
    assert bound["cpu_budget_ms"] < 0


def test_nothing_measured_gives_no_ratio() -> None:
    assert cpu_bound(0.0, {}, 0.0, {}, 0.8)["cpu_ratio"] == 0.0
