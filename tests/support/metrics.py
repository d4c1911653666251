"""The metrics Continuity can expose, read from the process's Prometheus registry."""

from __future__ import annotations

import prometheus_client

import shared.platform.metrics  # noqa: F401 - registers the metrics


def exported_series() -> dict[str, dict[str, set[str]]]:
    """Sample name -> its label names, for every continuity_* sample the registry can expose
    (a counter's _total, a histogram's _bucket/_sum/_count, a gauge's own name)."""
    series: dict[str, dict[str, set[str]]] = {}
    registered = prometheus_client.REGISTRY._collector_to_names
    for collector, names in registered.items():
        labels = set(getattr(collector, "_labelnames", ()))
        for name in names:
            if not name.startswith("continuity_") or name.endswith("_created"):
                continue
            if f"{name}_total" in names or f"{name}_bucket" in names:
                continue  # a counter's or histogram's family name is never a sample name
            series[name] = {"labels": labels | ({"le"} if name.endswith("_bucket") else set())}
    return series
