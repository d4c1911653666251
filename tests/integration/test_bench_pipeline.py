"""`continuity bench pipeline --json` with small numbers: a classifier process and the baseline
consumer process on embedded servers, one JSON object with the figures."""

from __future__ import annotations

from tests.support.bench import bench_json


def test_bench_pipeline_prints_one_json_object_with_its_figures() -> None:
    result = bench_json("pipeline", "--events", "200", "--rounds", "1", "--concurrency", "16")
    for key in ("events_per_s", "baseline_per_s", "ratio", "p50_ms", "p99_ms"):
        assert isinstance(result[key], int | float) and result[key] > 0, key
    assert abs(result["ratio"] - result["events_per_s"] / result["baseline_per_s"]) < 0.01
    # Both kinds of direct decision, one per event, and nothing else.
    assert result["decisions"] == {"operator": 100, "retry_same_session": 100}
