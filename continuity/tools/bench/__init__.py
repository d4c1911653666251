"""`continuity bench`: throughput and latency next to raw NATS and Redis baselines measured in
the same run. Figures are printed, never asserted."""

from __future__ import annotations

import argparse

from continuity.cli.examples import examples


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="measure Continuity against raw NATS/Redis baselines")
    kinds = bench.add_subparsers(dest="kind", required=True)
    examples(
        bench,
        "continuity bench sessions",
        "continuity bench pipeline --replicas 2 --json",
        "continuity bench fairness",
        "continuity bench tenancy",
        "continuity bench quotas",
        "continuity bench memory",
        "continuity bench listing",
    )
    from continuity.tools.bench import (
        fairness,
        listing,
        memory,
        pipeline,
        quotas,
        replay,
        sessions,
        tenancy,
        tracing,
    )

    sessions.register(kinds)
    pipeline.register(kinds)
    fairness.register(kinds)
    tenancy.register(kinds)
    quotas.register(kinds)
    replay.register(kinds)
    tracing.register(kinds)
    memory.register(kinds)
    listing.register(kinds)
