"""`continuity bench tenancy` with tiny counts: the structure of the JSON, that every figure is a
positive number, and that every measured decide found its runner's committed session. Timings
are never asserted."""

from __future__ import annotations

import subprocess
import sys

from tests.support.bench import bench, machine_facts, positive

LATENCY = ("p50_ms", "p95_ms", "p99_ms", "max_ms")
DECIDE_FIGURES = (
    "echo_per_s", "echo_p50_ms", "echo_p99_ms", "cold_per_s", "cold_p50_ms", "cold_p99_ms",
    "warm_per_s", "warm_p50_ms", "warm_p99_ms", "cold_ratio", "warm_ratio", "cold_p99_ratio",
    "warm_p99_ratio", "cold_over_warm",
)  # fmt: skip


def test_bench_tenancy_issues_runners_commits_sessions_and_measures_fairness_and_decide() -> None:
    result = bench(
        "tenancy", "--runners", "20", "--sessions", "50", "--flood", "200", "--quiet-events", "20",
        "--rounds", "2", "--concurrency", "8",
    )  # fmt: skip
    assert (result["runners"], result["tenants"], result["sessions"]) == (20, 5, 50)
    positive(result, "register_s", "register_per_s", "commit_s", "commit_per_s")

    fair = result["fairness"]
    assert fair["quiet_alone"]["count"] == 20
    assert 1 <= fair["quiet_during_flood"]["count"] <= 20
    positive(fair["quiet_alone"], *LATENCY)
    positive(fair["quiet_during_flood"], *LATENCY)
    positive(fair, "p95_ratio", "target_p95_ms", "flood_publish_s", "flood_publish_per_s")
    assert fair["flood_events"] == 200 and sum(fair["flood_decisions"].values()) == 200

    decide = result["decide"]
    # 20 runners: the quiet and the noisy one, one warming each replica up, 17 measured.
    assert (decide["requests"], decide["rounds"], decide["concurrency"]) == (17, 2, 8)
    positive(decide, *DECIDE_FIGURES)
    assert abs(decide["cold_ratio"] - decide["cold_per_s"] / decide["echo_per_s"]) < 0.01
    assert abs(decide["warm_ratio"] - decide["warm_per_s"] / decide["echo_per_s"]) < 0.01
    assert all(len(decide[f"{k}_rounds_per_s"]) == 2 for k in ("echo", "cold", "warm"))
    # Each runner's decide found the session it committed, in both passes of both rounds: its
    # record was read (cold) or cached (warm) and let it see its own tenant's session.
    assert decide["cold_modes"] == decide["warm_modes"] == {"resume": 34}
    assert decide["warm_within_cache"] is True
    assert result["production"] is False
    assert result["nats_version"].count(".") == 2
    assert result["servers"]["nats"] == "1 server"
    machine_facts(result)


def test_bench_tenancy_refuses_requests_past_its_runners() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "continuity", "bench", "tenancy", "--runners", "20", "--sessions", "50",
         "--requests", "18"],
        capture_output=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--requests must be 0 to 17" in proc.stderr.decode()
