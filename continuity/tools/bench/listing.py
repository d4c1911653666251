"""`continuity bench listing`: `continuity.runs.list` over many finished runs listed in
CONTINUITY_HISTORY (contract 9.14), through the real reconciliation service.

On a NATS server and a Redis of its own, with the reconciliation service as a `continuity serve`
process, it lists `--runs` finished runs in the stream as the runs index's trim does (a listing
and its pointer per run), spread over `--days` days, `--runners` runners in `--tenants` tenants,
the four final statuses and three reasons; Redis holds none of them. Then, per query, the first
page (100 runs) three times, and for a filter that leaves few runs every page: its latency and
what it returned. Beside them, in the same run, the raw costs a page is made of: a message get
of one run's listing, and a consumer created, counted and deleted on a filter of one hour.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from nats.js import JetStreamContext

from continuity.cli.examples import examples
from continuity.devstack.servers import NatsServer, RedisServer
from continuity.devstack.stack import Stack
from continuity.tools.bench.deployment import machine, printed
from shared.contract import RunsListRequest, subjects
from shared.contract.client import ContinuityClient
from shared.contract.runs import RunEntry
from shared.contract.sessions import SessionRef
from shared.contract.times import rfc3339_from_epoch
from shared.records.history_listing import Filters, HistoryListing, hour_of, listing_subject, pointer_subject

STATUSES = ("recovered", "recovered", "recovered_replaced", "recovered_fresh", "abandoned")
"""Drawn in turn: recovered twice as often as the others."""
REASONS = ("native_session_interrupted", "native_session_continuity_break", "native_session_missing")
WINDOW = 2000
"""Publications in flight while the listings are loaded."""
ROUNDS = 3
PAGE = 100


def entry_of(i: int, runners: int, tenants: int, at: float) -> RunEntry:
    """The i-th run: its runner, tenant, status and reason in turn; its last step at `at`."""
    runner = i % runners
    return RunEntry(
        run_id=f"run-{i:07d}",
        runner_id=f"runner-{runner:04d}",
        session=SessionRef(tenant=f"tenant-{runner % tenants}", conversation_id=f"c{i}", agent_id="agent"),
        attempt=1,
        status=STATUSES[i % len(STATUSES)],  # type: ignore[arg-type]
        action="retry_same_session",
        reason=REASONS[i % len(REASONS)],  # type: ignore[arg-type]
        decision_id=f"d{i}",
        updated_at=rfc3339_from_epoch(at),
    )


def spread(i: int, runs: int, now: float, days: float) -> float:
    """The i-th run's time: evenly over the last `days` days, the newest last."""
    return now - days * 86_400 * (runs - i) / runs


async def load(js: JetStreamContext, runs: int, runners: int, tenants: int, days: float) -> float:
    """Lists `runs` runs as the trim does; returns the runs listed per second."""
    listing = HistoryListing(js)
    now = time.time()
    began = time.perf_counter()
    for start in range(0, runs, WINDOW):
        batch = []
        for i in range(start, min(runs, start + WINDOW)):
            entry = entry_of(i, runners, tenants, spread(i, runs, now, days))
            batch.append(listing.publish(entry, None, now))
        await asyncio.gather(*batch)
    return runs / (time.perf_counter() - began)


async def timed_pages(client: ContinuityClient, req: RunsListRequest, every: bool) -> dict[str, Any]:
    """The first page, `ROUNDS` times (or, with `every`, every page once per round)."""
    took: list[float] = []
    items: list[RunEntry] = []
    pages = 0
    for _ in range(ROUNDS):
        cursor = None
        items = []
        pages = 0
        began = time.perf_counter()
        while True:
            page = await client.runs(RunsListRequest(**{**_fields(req), "cursor": cursor}))
            items += page.items
            pages += 1
            cursor = page.next_cursor
            if cursor is None or not every:
                break
        took.append((time.perf_counter() - began) * 1000)
    ordered = [(e.updated_at, e.run_id) for e in items] == sorted((e.updated_at, e.run_id) for e in items)
    return {"ms": [round(t, 1) for t in took], "ms_median": round(statistics.median(took), 1),
            "items": len(items), "pages": pages, "ordered": ordered}  # fmt: skip


def _fields(req: RunsListRequest) -> dict[str, Any]:
    return {f: getattr(req, f) for f in req.__struct_fields__}


async def raw_costs(js: JetStreamContext, runs: int, now: float, days: float) -> dict[str, float]:
    """A message get of one run's pointer, and a consumer created, counted and deleted on an
    hour's filter, each the median of 20."""
    listing = HistoryListing(js)
    gets: list[float] = []
    counts: list[float] = []
    hour = hour_of(spread(runs // 2, runs, now, days))
    for i in range(20):
        began = time.perf_counter()
        await js.get_last_msg(subjects.HISTORY_STREAM, pointer_subject(f"run-{(i * 7919) % runs:07d}"))
        gets.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        await listing.count(Filters().subject(hour=hour))
        counts.append((time.perf_counter() - began) * 1000)
    return {
        "message_get_ms": round(statistics.median(gets), 2),
        "hour_count_ms": round(statistics.median(counts), 2),
    }


async def _measure(url: str, runs: int, runners: int, tenants: int, days: float) -> dict[str, Any]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        rate = await load(js, runs, runners, tenants, days)
        now = time.time()
        info = await js.stream_info(subjects.HISTORY_STREAM)
        client = ContinuityClient(nc, timeout=120)
        last_hour = rfc3339_from_epoch(now - 3600)
        queries = {
            "all": (RunsListRequest(limit=PAGE), False),
            "status": (RunsListRequest(status="recovered_fresh", limit=PAGE), False),
            "tenant": (RunsListRequest(tenant="tenant-1", limit=PAGE), False),
            "last_hour": (RunsListRequest(updated_after=last_hour, limit=PAGE), False),
            "runner_every_page": (RunsListRequest(runner_id="runner-0001", limit=PAGE), True),
        }
        found = {name: await timed_pages(client, req, every) for name, (req, every) in queries.items()}
        raw = await raw_costs(js, runs, now, days)
    finally:
        await nc.close()
    first = entry_of(0, runners, tenants, now)
    return {
        "runs": runs,
        "runners": runners,
        "tenants": tenants,
        "days": days,
        "listed_per_s": round(rate),
        "stream_messages": info.state.messages,
        "stream_bytes": info.state.bytes,
        "stream_bytes_per_run": round(info.state.bytes / runs),
        "subject_example": listing_subject(first).rsplit(".", 1)[0] + ".<run>",
        "queries": found,
        "raw": raw,
        "runner_runs_expected": len(range(1, runs, runners)),
    }


def run(data_dir: Path, runs: int, runners: int, tenants: int, days: float) -> dict[str, Any]:
    stack = Stack(data_dir=data_dir)
    try:
        stack.nats = NatsServer(data_dir / "nats")
        stack.nats.start()
        stack.nats_url = stack.nats.url
        stack.redis = RedisServer(data_dir / "redis")
        stack.redis.start()
        stack.redis_url = stack.redis.url
        env = {
            "CONTINUITY_LOG_LEVEL": "WARNING",
            "CONTINUITY_TENANCY": "open",
            "CONTINUITY_HISTORY_MAX_BYTES": "4Gi",
        }
        stack.start_service("reconciliation", env, log_path=data_dir / "reconciliation.log")
        stack.wait_ready(60.0)
        return asyncio.run(_measure(stack.nats_url, runs, runners, tenants, days))
    finally:
        stack.stop()


def report(r: dict[str, Any]) -> str:
    lines = [
        f"runs list over {r['runs']:,} finished runs in CONTINUITY_HISTORY ({r['runners']:,} runners, "
        f"{r['tenants']} tenants, {r['days']:g} days), Redis holding none of them",
        f"  listed {r['listed_per_s']:,} runs/s; the stream {r['stream_messages']:,} messages, "
        f"{r['stream_bytes']:,} B ({r['stream_bytes_per_run']:,} B per run's listing and pointer)",
        f"  raw: a message get {r['raw']['message_get_ms']} ms, "
        f"an hour's count {r['raw']['hour_count_ms']} ms",
    ]
    for name, q in r["queries"].items():
        lines.append(
            f"  {name:<18} {q['ms_median']:>8} ms median ({', '.join(map(str, q['ms']))}), "
            f"{q['items']:,} runs in {q['pages']} page(s), ordered {q['ordered']}, "
            f"{q['ms_median'] / max(r['raw']['hour_count_ms'], 0.01):.1f} hour counts"
        )
    return "\n".join(lines)


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("listing", help="runs list over finished runs listed in CONTINUITY_HISTORY")
    p.add_argument("--runs", type=int, default=100_000, help="finished runs listed (default 100000)")
    p.add_argument("--runners", type=int, default=1000, help="runners they belong to (default 1000)")
    p.add_argument("--tenants", type=int, default=5, help="tenants of the runners (default 5)")
    p.add_argument("--days", type=float, default=30.0, help="days their last steps spread over (default 30)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)
    examples(p, "continuity bench listing", "continuity bench listing --runs 1000000 --json")


def main(args: argparse.Namespace) -> int:
    if args.runs < args.runners or args.runners < 2 or args.tenants < 1 or not 0 < args.days <= 30:
        print("error: need --runs >= --runners >= 2, --tenants >= 1 and 0 < --days <= 30", file=sys.stderr)
        return 2
    started = machine()
    with tempfile.TemporaryDirectory(prefix="continuity-bench-listing-") as tmp:
        result = run(Path(tmp), args.runs, args.runners, args.tenants, args.days)
    return printed(result, started, args.json, report)
