"""The bound metric writers leave exactly the figures prometheus_client's own calls leave."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Histogram

from shared.platform import metrics

BUCKETS = (0.001, 0.01, 0.1, 1.0)
AMOUNTS = (0.0, 0.0005, 0.001, 0.002, 0.01, 0.05, 0.1, 0.99, 1.0, 7.5, math.inf, math.nan)


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_adder_counts_like_inc() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    c1 = Counter("t_total", "t", ["endpoint", "code"], registry=theirs)
    c2 = Counter("t_total", "t", ["endpoint", "code"], registry=ours)
    for code in ("ok", "ok", "not_found", "ok"):
        c1.labels("decide", code).inc()
        metrics.adder(c2, "decide", code)()
    assert samples(ours) == samples(theirs)
    assert samples(ours)[("t_total", (("code", "ok"), ("endpoint", "decide")))] == 3


def test_observer_fills_the_buckets_observe_fills() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    h1 = Histogram("t_seconds", "t", ["endpoint"], buckets=BUCKETS, registry=theirs)
    h2 = Histogram("t_seconds", "t", ["endpoint"], buckets=BUCKETS, registry=ours)
    for amount in AMOUNTS:
        h1.labels("decide").observe(amount)
        metrics.observer(h2, "decide")(amount)
    mine, expected = samples(ours), samples(theirs)
    assert mine.keys() == expected.keys()
    assert all(same(mine[k], expected[k]) for k in expected), (mine, expected)
    assert mine[("t_seconds_bucket", (("endpoint", "decide"), ("le", "0.001")))] == 3


def test_unlabelled_metrics_are_written_directly() -> None:
    registry = CollectorRegistry()
    counter = Counter("u_total", "u", registry=registry)
    histogram = Histogram("u_seconds", "u", buckets=BUCKETS, registry=registry)
    metrics.adder(counter)()
    metrics.observer(histogram)(0.05)
    found = samples(registry)
    assert found[("u_total", ())] == 1
    assert found[("u_seconds_bucket", (("le", "0.1"),))] == 1
    assert found[("u_seconds_bucket", (("le", "0.01"),))] == 0
