"""`continuity bench pipeline|sessions --replicas 2` and `--production` with tiny counts: the
structure of the JSON and that every figure is a positive number. Timings are never asserted."""

from __future__ import annotations

from tests.support.bench import bench, machine_facts, positive, summed_cpu_allows


def around_costs(*costs: dict[str, float]) -> None:
    """The servers started for the run and the load generator, each with its CPU per event
    (10 ms clock ticks: a tiny run may read 0)."""
    for cost in costs:
        assert set(cost) == {"nats", "redis", "load generator"}, cost
        assert all(isinstance(ms, float | int) and ms >= 0 for ms in cost.values()), cost


PIPELINE_FIGURES = (
    "events_per_s", "p50_ms", "p99_ms", "baseline_per_s", "ratio", "scaling",
    "cpu_ms_per_event", "baseline_cpu_ms_per_event", "writes_per_event", "baseline_writes_per_event",
)  # fmt: skip


def test_bench_pipeline_measures_one_and_two_classifier_replicas() -> None:
    result = bench("pipeline", "--events", "300", "--rounds", "1", "--concurrency", "16", "--replicas", "2")
    steps = result["steps"]
    assert [s["replicas"] for s in steps] == [1, 2]
    for s in steps:
        positive(s, *PIPELINE_FIGURES)
        assert abs(s["ratio"] - s["events_per_s"] / s["baseline_per_s"]) < 0.01
        around_costs(s["around_cpu_ms_per_event"], s["baseline_around_cpu_ms_per_event"])
        summed_cpu_allows(
            s["cpu_ms_per_event"], s["around_cpu_ms_per_event"], s["baseline_cpu_ms_per_event"],
            s["baseline_around_cpu_ms_per_event"], s["cpu_ratio"], s["cpu_budget_ms_per_event"], 0.8,
        )  # fmt: skip
    assert steps[0]["scaling"] == 1.0
    assert abs(steps[1]["scaling"] - steps[1]["events_per_s"] / steps[0]["events_per_s"]) < 0.01
    # The top level is the one-replica step, as before there were replicas.
    assert all(result[k] == steps[0][k] for k in PIPELINE_FIGURES if k != "scaling")
    # Every measured event got its one direct decision, at both replica counts.
    assert result["decisions"] == {"operator": 300, "retry_same_session": 300}
    assert result["production"] is False
    assert result["nats_version"].count(".") == 2
    assert result["servers"]["nats"] == "1 server"
    assert result["events_stream"] == {"num_replicas": 1, "placed_on_servers": 1}
    assert result["baseline_stream"] == result["events_stream"]
    assert result["servers"]["redis_version"].count(".") == 2
    machine_facts(result)


def test_bench_sessions_measures_one_and_two_session_store_replicas() -> None:
    result = bench(
        "sessions", "--requests", "1500", "--rounds", "1", "--sessions", "100", "--concurrency", "16",
        "--replicas", "2",
    )  # fmt: skip
    steps = result["steps"]
    assert [s["replicas"] for s in steps] == [1, 2]
    for s in steps:
        positive(
            s, "echo_per_s", "decide_per_s", "commit_per_s", "evalsha_per_s", "decide_ratio",
            "commit_ratio", "decide_scaling", "decide_cpu_ms_per_request", "commit_cpu_ms_per_request",
            "echo_cpu_ms_per_request", "decide_writes_per_request",
        )  # fmt: skip
        assert abs(s["decide_ratio"] - s["decide_per_s"] / s["echo_per_s"]) < 0.01
        around_costs(s["decide_around_cpu_ms_per_request"], s["echo_around_cpu_ms_per_request"])
        summed_cpu_allows(
            s["decide_cpu_ms_per_request"], s["decide_around_cpu_ms_per_request"],
            s["echo_cpu_ms_per_request"], s["echo_around_cpu_ms_per_request"], s["decide_cpu_ratio"],
            s["decide_cpu_budget_ms_per_request"], 0.9,
        )  # fmt: skip
    assert steps[0]["decide_scaling"] == 1.0
    assert result["decide_per_s"] == steps[0]["decide_per_s"]
    positive(result, "bytes_per_session")
    machine_facts(result)


def test_bench_pipeline_production_runs_on_a_jetstream_cluster_and_redis_with_aof() -> None:
    result = bench("pipeline", "--events", "200", "--rounds", "1", "--concurrency", "16", "--production")
    positive(result["steps"][0], *PIPELINE_FIGURES)
    assert result["production"] is True
    assert result["decisions"] == {"operator": 100, "retry_same_session": 100}
    # As the servers report them, not as they were asked for.
    assert result["events_stream"] == {"num_replicas": 3, "placed_on_servers": 3}
    assert result["baseline_stream"] == result["events_stream"]
    servers = result["servers"]
    assert servers["nats"] == "3-node JetStream cluster"
    assert (servers["redis_appendonly"], servers["redis_appendfsync"]) == ("yes", "everysec")
