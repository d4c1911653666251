"""`continuity bench tracing --json` with small numbers: one classifier process replaced by one
under each tracing setting, the baseline consumer and an OTLP receiver process on embedded
servers, one JSON object with the figures. Nothing here asserts a speed."""

from __future__ import annotations

from typing import Any

from tests.support.bench import bench_json, summed_cpu_allows


def test_bench_tracing_prints_each_setting_and_the_spans_it_exported() -> None:
    result = bench_json("tracing", "--events", "200", "--rounds", "1", "--concurrency", "32")
    settings = result["settings"]
    assert set(settings) == {"off", "on", "sampled_out"}
    base = result["baseline"]["events_per_s"]
    assert isinstance(base, int) and base > 0
    for name, s in settings.items():
        for key in ("events_per_s", "p50_ms", "p99_ms"):
            assert isinstance(s[key], int | float) and s[key] > 0, (name, key)
        assert abs(s["ratio_to_baseline"] - s["events_per_s"] / base) < 0.01, name
        assert len(s["rounds_per_s"]) == 1
    off, on, out = settings["off"], settings["on"], settings["sampled_out"]
    assert abs(result["on_off_throughput"] - on["events_per_s"] / off["events_per_s"]) < 0.001
    assert abs(result["sampled_out_off_throughput"] - out["events_per_s"] / off["events_per_s"]) < 0.001
    if off["cpu_ms_per_event"] > 0:  # 10 ms clock ticks: a short round may read none
        assert abs(result["on_off_cpu"] - on["cpu_ms_per_event"] / off["cpu_ms_per_event"]) < 0.001
        assert abs(result["sampled_out_off_cpu"] - out["cpu_ms_per_event"] / off["cpu_ms_per_event"]) < 0.001
    assert result["target_on_off_throughput"] == 0.85
    assert result["target_sampled_out_off_throughput"] == 0.95
    # What the summed CPU allows follows from the printed CPU, the OTLP receiver left out.
    for s, bound, budget, target in (
        (on, "on_off_cpu_ratio", "on_cpu_budget_ms_per_event", 0.85),
        (out, "sampled_out_off_cpu_ratio", "sampled_out_cpu_budget_ms_per_event", 0.95),
    ):
        assert "otlp receiver" in s["around_cpu_ms_per_event"]
        summed_cpu_allows(
            s["cpu_ms_per_event"], without_receiver(s), off["cpu_ms_per_event"], without_receiver(off),
            result[bound], result[budget], target,
        )  # fmt: skip
    # Exported only when on: every measured event's trace reached the receiver, warm-up's too.
    assert off["spans_received"] == 0 and out["spans_received"] == 0
    assert result["on_measured_events"] == 200 and result["on_measured_traced"] == 200
    assert on["spans_received"] >= result["on_measured_spans"] >= 200


def without_receiver(setting: dict[str, Any]) -> dict[str, float]:
    """A setting's CPU per event elsewhere, the OTLP receiver left out (as the bench's bound)."""
    return {k: v for k, v in setting["around_cpu_ms_per_event"].items() if k != "otlp receiver"}
