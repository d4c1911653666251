"""`continuity bench`: throughput and latency next to raw NATS and Redis baselines measured in
the same run. Figures are printed, never asserted."""

from __future__ import annotations

import argparse
import importlib


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="measure Continuity against raw NATS/Redis baselines")
    kinds = bench.add_subparsers(dest="kind", required=True)
    for module in ("continuity.bench.sessions", "continuity.bench.pipeline"):
        try:
            importlib.import_module(module).register(kinds)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise
