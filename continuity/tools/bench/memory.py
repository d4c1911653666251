"""`continuity bench memory`: Redis bytes per finished run, measured through the real services.

A NATS server and a Redis of its own, the four services as `continuity serve` processes, and the
simulator's fleet (`continuity simulate`) playing runs to their end: resume failures, retries,
replacements after an archive (some failed, some timed out), operator stops and reconciliations
that its operator follows up, turns completed or failed again, so that every run ends recovered,
failed or abandoned. Once the fleet has seen every outcome, every durable consumer has nothing
pending and every outbox is empty, Redis's `used_memory` is read again: its growth over the
finished runs and their sessions is the figure. `MEMORY USAGE` summed per key family (the key
layout of `shared.records.keys`) explains it; the growth over that sum is the server's own
overhead (its dictionaries, the expiry table, allocator slack).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from continuity.cli.examples import examples
from continuity.devstack.servers import NatsServer, RedisServer
from continuity.devstack.stack import Stack
from continuity.tools import memory as estimate
from continuity.tools.bench.deployment import machine
from continuity.tools.simulate.fleet import Fleet
from continuity.tools.simulate.keys import DEMO_KEYS, DEMO_KEYS_ENV
from continuity.tools.simulate.result import Result, Settings
from continuity.tools.simulate.scenarios import DEFAULT_MIX, parse_mix
from services import registry
from shared.contract import subjects
from shared.contract.runs import RunEntry
from shared.platform.config import Config
from shared.platform.redis import Redis
from shared.platform.redis.store import pairs
from shared.records import keys
from shared.records.history import FINAL_STATUSES
from shared.records.history_listing import HistoryListing
from shared.records.store import RunStore

SERVICES = ("session-store", "classifier", "archiver", "reconciliation")
ARCHIVE_TIMEOUT_S = 1.0
"""The archiver's wait for a runner's move: short, so that the timed-out archives of the mix end
within the run."""
MIXES = {"typical": DEFAULT_MIX}
"""`--mix` names; anything else is read as the simulator's `name=weight,...`."""
FINISHED = ("recovered", "recovered_replaced", "recovered_fresh", "failed", "abandoned")
LINGER_S = 900.0
"""The finished runs' linger in Redis here (CONTINUITY_HISTORY_LINGER_S): longer than the run, so
that the first reading holds every finished run's records; its end is then brought forward
(`end_the_linger`) for the second."""
SHIPPED_LINGER_DAYS = Config.history_linger_s / 86_400
SHIPPED_RETENTION_DAYS = Config.retention_days


# ---- key families, from the key layout ----------------------------------------------------------

_S, _R = "\x00s", "\x00r"


def _template(text: str) -> re.Pattern[str]:
    """A key function's output with sentinel arguments, as a pattern of every key it makes."""
    pattern = re.escape(text).replace(re.escape(_S), r"[^}]+").replace(re.escape(_R), r"[^}]+")
    return re.compile(pattern)


def _buckets(make: Callable[[int], str], count: int, tail: str = "") -> re.Pattern[str]:
    return re.compile("|".join(re.escape(make(b)) + tail for b in range(count)))


FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("session", _template(keys.session(_S))),
    ("session ownership", _template(keys.session_ownership(_S))),
    ("run", _template(keys.run(_S, _R))),
    ("decisions", _template(keys.run_decisions(_S, _R))),
    ("audit", _template(keys.run_audit(_S, _R))),
    ("reconciliation history", _template(keys.reconciliation_history(_S, _R))),
    ("reconciliation", _template(keys.reconciliation(_S, _R))),
    ("outbox", _template(keys.outbox(_S))),
    ("archive held", _template(keys.held_archive(_S, _R))),
    ("archive copy", _template(keys.archive_copy(_S, _R))),
    ("archive progress", _template(keys.archive_progress(_S, _R))),
    ("run lookup", _template(keys.run_index(_R))),
    ("runs index versions", _buckets(keys.runs_index_versions, keys.RUNS_INDEX_BUCKETS)),
    ("runs index entries", _buckets(keys.runs_index_entries, keys.RUNS_INDEX_BUCKETS)),
    (
        "runs index listings",
        _buckets(
            lambda b: keys.runs_index_listing(b)[: -len("all")], keys.RUNS_INDEX_BUCKETS, r"(all|status:.+)"
        ),
    ),
    (
        "stored runs",
        re.compile(f"{_template(keys.runner_runs(_R)).pattern}|{_template(keys.tenant_runs(_R)).pattern}"),
    ),
    (
        "event rates",
        re.compile(
            f"{_template(keys.runner_event_rate(_R)).pattern}|{_template(keys.tenant_event_rate(_R)).pattern}"
        ),
    ),
    ("recovery budget", re.compile(_template(keys.recovery_budget(_R, 0)).pattern[: -len("0")] + r"\d+")),
    (
        "reconciliation listing",
        re.compile(
            _buckets(keys.reconciliations_open, keys.RECONCILIATION_BUCKETS).pattern
            + "|"
            + _buckets(keys.reconciliations_delivered, keys.RECONCILIATION_BUCKETS).pattern
        ),
    ),
    (
        "runner directory",
        re.compile(f"{_template(keys.runner(_R)).pattern}|{re.escape(keys.RUNNERS_INDEX)}(:audit)?"),
    ),
    (
        "compatibility",
        re.compile(f"{re.escape(keys.compatibility_declarations())}|{re.escape(keys.compatibility_audit())}"),
    ),
)
RUN_FAMILIES = frozenset(
    {
        "run",
        "decisions",
        "audit",
        "reconciliation history",
        "reconciliation",
        "archive progress",
        "run lookup",
        "runs index versions",
        "runs index entries",
        "runs index listings",
        "stored runs",
        "reconciliation listing",
    }
)
"""What a finished run leaves for the retention; the rest is a session's (kept with it), an archive
copy's (the archive retention), or the deployment's own (rates, budgets, the directory)."""


def family(name: str) -> str:
    """A key's family: its function in the key layout, or `other <prefix>` for none."""
    for label, pattern in FAMILIES:
        if pattern.fullmatch(name):
            return label
    return f"other {name.split('{', 1)[0]}"


# ---- what Redis holds -----------------------------------------------------------------------------


@dataclass
class Holding:
    """Redis at one moment: `INFO memory`, its clients' memory, and `MEMORY USAGE` and key counts
    per family."""

    used_memory: int
    clients_memory: int
    """`tot-mem` of `CLIENT LIST` summed: the connections' buffers, however many the services
    keep open, not the data."""
    scripts_memory: int
    """The script cache, which grows as the services first use each script."""
    bytes: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


async def _scan(client: Redis, match: str = "*") -> list[str]:
    found: list[str] = []
    cursor = b"0"
    while True:
        cursor, batch = await client.execute("SCAN", cursor, "MATCH", match, "COUNT", 1000)
        found += [k.decode() for k in batch]
        if cursor in (b"0", 0, "0"):
            return found


async def holding(client: Redis) -> Holding:
    names = await _scan(client)
    sizes: list[Any] = []
    for start in range(0, len(names), 500):
        chunk = names[start : start + 500]
        sizes += await client.batch([("MEMORY", "USAGE", n, "SAMPLES", "0") for n in chunk])
    # INFO after the scan: the server's figure and the keys' are of the same keys.
    h = Holding(*await estimate.server_memory(client))
    for name, size in zip(names, sizes, strict=True):
        label = family(name)
        h.bytes[label] = h.bytes.get(label, 0) + int(size or 0)
        h.counts[label] = h.counts.get(label, 0) + 1
    return h


async def statuses(client: Redis) -> dict[str, int]:
    """The runs by the status their record holds."""
    names = [n for n in await _scan(client, "continuity:run:*") if family(n) == "run"]
    found: dict[str, int] = {}
    for start in range(0, len(names), 500):
        chunk = names[start : start + 500]
        for status in await client.batch([("HGET", n, "status") for n in chunk]):
            text = status.decode() if isinstance(status, bytes) else str(status)
            found[text] = found.get(text, 0) + 1
    return dict(sorted(found.items()))


async def settled(nats_url: str, client: Redis, timeout_s: float) -> float:
    """Until every durable consumer of the services has nothing pending or unacknowledged and
    every outbox is empty (each publication made and its entry removed); the seconds it took."""
    began = time.monotonic()
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    try:
        consumers = registry.durable_consumers(1, 30.0)
        while True:
            busy = False
            for c in consumers:
                info = await js.consumer_info(c.stream, c.durable)
                busy = busy or bool(info.num_pending or info.num_ack_pending)
            outboxes = await _scan(client, keys.OUTBOX_PATTERN)
            if not busy and not outboxes:
                return time.monotonic() - began
            if time.monotonic() - began > timeout_s:
                raise RuntimeError(f"the services did not settle within {timeout_s:g}s")
            await asyncio.sleep(0.1)  # poll interval of a deadline-bounded wait
    finally:
        await nc.close()


async def end_the_linger(client: Redis, nats_url: str, linger_s: float, timeout_s: float = 60.0) -> float:
    """The linger's end, brought forward: every key whose time to live is within the linger
    (the finished runs' records given it once CONTINUITY_HISTORY held them, contract 9.14;
    nothing else the services write lives that short but the event-rate buckets, of seconds)
    expires now; then until no finished run's record is left, and until the runs index's trim
    has listed every finished run in the stream and removed its Redis entry, as the service's
    would once the linger is over. Returns the seconds it took."""
    began = time.monotonic()
    await _expire_lingering(client, linger_s)
    await _records_gone(client, began, timeout_s)
    await _listed_in_history(client, nats_url)
    return time.monotonic() - began


async def _expire_lingering(client: Redis, linger_s: float) -> None:
    names = await _scan(client)
    for start in range(0, len(names), 500):
        chunk = names[start : start + 500]
        ttls = await client.batch([("PTTL", n) for n in chunk])
        ending = [n for n, ttl in zip(chunk, ttls, strict=True) if 0 < int(ttl) <= linger_s * 1000]
        if ending:
            await client.batch([("PEXPIRE", n, 1) for n in ending])


async def _records_gone(client: Redis, began: float, timeout_s: float) -> None:
    while True:
        left = sum(n for status, n in (await statuses(client)).items() if status in FINAL_STATUSES)
        if not left:
            return
        if time.monotonic() - began > timeout_s:
            raise RuntimeError(f"{left} finished runs were still in Redis after their linger")
        await asyncio.sleep(0.2)  # poll interval of a deadline-bounded wait


async def _listed_in_history(client: Redis, nats_url: str) -> None:
    """What the runs index's trim does once the linger is over (the service's looks only at
    entries decided more than its linger ago, by its own clock): every finished run whose
    record is gone is listed in CONTINUITY_HISTORY and its Redis entry removed."""
    nc = await nats.connect(nats_url)
    try:
        listing = HistoryListing(nc.jetstream(), grace_s=0.0)
        runs = RunStore(client)
        for bucket in range(keys.RUNS_INDEX_BUCKETS):
            entries = pairs(await client.execute("HGETALL", keys.runs_index_entries(bucket)))
            versions = pairs(await client.execute("HGETALL", keys.runs_index_versions(bucket)))
            for run_id, raw in entries.items():
                entry = _run_entry.decode(raw)
                if entry.status not in FINAL_STATUSES or await client.execute(
                    "EXISTS", keys.run(entry.session.key, entry.run_id)
                ):
                    continue
                await listing.list_moved(entry)  # lists it (no grace here to wait out)
                await runs.runs_index_forget(run_id.decode(), versions[run_id].split(b"|")[0].decode())
    finally:
        await nc.close()
    if left := await _finished_entries(client):
        raise RuntimeError(f"{left} finished runs were still in the runs index after their linger")


async def _finished_entries(client: Redis) -> int:
    counts = await client.batch(
        [
            ("ZCARD", keys.runs_index_listing(bucket, status))
            for bucket in range(keys.RUNS_INDEX_BUCKETS)
            for status in sorted(FINAL_STATUSES)
        ]
    )
    return sum(int(n) for n in counts)


async def history_stream(nats_url: str) -> dict[str, int]:
    """CONTINUITY_HISTORY's bytes and messages: the runs' copies (one per finished run) and
    their listings (a listing and its pointer per finished run whose Redis entry has gone)."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        state = (await js.stream_info(subjects.HISTORY_STREAM)).state
        copies = await _messages_on(js, subjects.HISTORY_RUN + ">")
        listings = await _messages_on(js, subjects.HISTORY_LIST + ">")
    except NotFoundError:  # no run has ended yet
        return {"messages": 0, "bytes": 0, "copies": 0, "listings": 0}
    finally:
        await nc.close()
    return {"messages": state.messages, "bytes": state.bytes, "copies": copies, "listings": listings}


async def _messages_on(js: JetStreamContext, filter_subject: str) -> int:
    info = await js.stream_info(subjects.HISTORY_STREAM, subjects_filter=filter_subject)
    return sum((info.state.subjects or {}).values())


_run_entry = msgspec.json.Decoder(RunEntry)


# ---- the run ----------------------------------------------------------------------------------------

ARCHIVE_FAMILIES = frozenset({"archive copy", "archive held"})
"""Copies kept for the archive retention: a replaced session's, and a held record's once a new
commit replaces it."""
SESSION_FAMILIES = frozenset({"session", "session ownership"})


def fleet_settings(nats_url: str, runs: int, mix: str, seed: int | None) -> Settings:
    return Settings(
        runners=4,
        events=runs,
        rate=50.0,
        mix=parse_mix(MIXES.get(mix, mix)),
        archive_fail_rate=0.1,
        archive_timeout_rate=0.05,
        seed=seed,
        nats_url=nats_url,
        keys=dict(DEMO_KEYS),
        deadline_s=20.0,
        archive_timeout_s=ARCHIVE_TIMEOUT_S,
    )


async def _measure(
    stack: Stack, runs: int, warmup: int, mix: str, seed: int | None, linger_s: float
) -> dict[str, Any]:
    client = Redis(stack.redis_url, cluster="off")
    try:
        # Warmed up first: the services' connections open, their scripts load and the runs
        # index's buckets exist, once for any number of runs.
        if warmup:
            await Fleet(fleet_settings(stack.nats_url, warmup, mix, None if seed is None else seed + 1)).run()
        await settled(stack.nats_url, client, 60.0)
        # The warm-up's finished runs are the baseline's.
        await end_the_linger(client, stack.nats_url, linger_s)
        stream_before = await history_stream(stack.nats_url)
        before_status = await statuses(client)
        before = await holding(client)
        result: Result = await Fleet(fleet_settings(stack.nats_url, runs, mix, seed)).run()
        settle_s = await settled(stack.nats_url, client, 120.0)
        after = await holding(client)
        after_status = await statuses(client)
        linger_wait_s = await end_the_linger(client, stack.nats_url, linger_s)
        after_linger = await holding(client)
        stream = await history_stream(stack.nats_url)
        stream = {k: v - stream_before[k] for k, v in stream.items()}
    finally:
        await client.aclose()
    by_status = {k: after_status.get(k, 0) - before_status.get(k, 0) for k in after_status}
    found = figures(before, after, by_status, result, settle_s, runs, mix)
    found.update(after_the_linger(before, after_linger, found, stream, linger_wait_s))
    return found


def after_the_linger(
    before: Holding, after: Holding, found: dict[str, Any], stream: dict[str, int], wait_s: float
) -> dict[str, Any]:
    """What stays once the finished runs' records have had their linger, per finished run, and
    the steady state at the shipped linger and retention (a day of 30)."""
    per = max(found["finished_runs"], 1)
    grown = {k: after.bytes.get(k, 0) - before.bytes.get(k, 0) for k in after.bytes | before.bytes}
    data = (
        (after.used_memory - before.used_memory)
        - (after.clients_memory - before.clients_memory)
        - (after.scripts_memory - before.scripts_memory)
    )
    kept = round(sum(v for k, v in grown.items() if k in RUN_FAMILIES) * found["overhead"] / per)
    lingering = found["run_bytes_per_finished_run"] - kept
    return {
        "linger_wait_s": round(wait_s, 2),
        "used_per_finished_run_after_linger": round(data / per),
        "run_bytes_after_linger": kept,
        "run_bytes_steady_state": round(kept + lingering * SHIPPED_LINGER_DAYS / SHIPPED_RETENTION_DAYS),
        "families_after_linger": {
            k: round(v / per) for k, v in sorted(grown.items(), key=lambda kv: -kv[1]) if v
        },
        "history_messages": stream["messages"],
        "history_copies": stream["copies"],
        "history_listings": stream["listings"],
        "history_bytes": stream["bytes"],
        "history_bytes_per_run": round(stream["bytes"] / max(stream["copies"], 1)),
    }


def figures(
    before: Holding,
    after: Holding,
    by_status: dict[str, int],
    result: Result,
    settle_s: float,
    runs: int,
    mix: str,
) -> dict[str, Any]:
    grown = {k: after.bytes.get(k, 0) - before.bytes.get(k, 0) for k in after.bytes | before.bytes}
    counts = {k: after.counts.get(k, 0) - before.counts.get(k, 0) for k in grown}
    keys_bytes = sum(grown.values())
    used = after.used_memory - before.used_memory
    clients = after.clients_memory - before.clients_memory
    scripts = after.scripts_memory - before.scripts_memory
    data = used - clients - scripts
    overhead = data / keys_bytes if keys_bytes > 0 else 1.0
    finished = sum(by_status.get(s, 0) for s in FINISHED)
    sessions = counts.get("session", 0)
    per = max(finished, 1)

    def of(names: frozenset[str]) -> int:
        return sum(v for k, v in grown.items() if k in names)

    return {
        "runs_started": runs,
        "mix": mix,
        "finished_runs": finished,
        "statuses": {k: v for k, v in by_status.items() if v},
        "sessions": sessions,
        "archive_copies": sum(counts.get(k, 0) for k in ARCHIVE_FAMILIES),
        "contradictions": len(result.checker.contradictions),
        "settle_s": round(settle_s, 2),
        "used_memory_growth": used,
        "clients_memory_growth": clients,
        "scripts_memory_growth": scripts,
        "keys_bytes": keys_bytes,
        "overhead": round(overhead, 3),
        "used_per_finished_run": round(data / per),
        "run_bytes_per_finished_run": round(of(RUN_FAMILIES) * overhead / per),
        "archive_bytes_per_finished_run": round(of(ARCHIVE_FAMILIES) * overhead / per),
        "session_bytes_per_session": round(of(SESSION_FAMILIES) * overhead / max(sessions, 1)),
        "families": {
            k: {"keys": counts[k], "bytes": grown[k], "per_finished_run": round(grown[k] / per)}
            for k in sorted(grown, key=lambda k: -grown[k])
            if grown[k] or counts[k]
        },
    }


def _kept(name: str) -> str:
    if name in RUN_FAMILIES:
        return ""
    if name in ARCHIVE_FAMILIES:
        return "  (archive retention)"
    return "  (a session's)" if name in SESSION_FAMILIES else "  (the deployment's)"


def report(r: dict[str, Any]) -> str:
    statuses = ", ".join(f"{k} {v}" for k, v in r["statuses"].items())
    lines = [
        f"Redis bytes per finished run: {r['runs_started']} runs started (mix {r['mix']}), "
        f"{r['finished_runs']} finished ({statuses}), {r['sessions']} sessions, "
        f"{r['contradictions']} contradictions; settled {r['settle_s']} s after the fleet's end",
        f"  used_memory growth {r['used_memory_growth']:,} B, of it client buffers "
        f"{r['clients_memory_growth']:,} B and script cache {r['scripts_memory_growth']:,} B; "
        f"keys' MEMORY USAGE {r['keys_bytes']:,} B: server overhead x{r['overhead']:.2f}",
        f"  all of it per finished run        {r['used_per_finished_run']:>8,} B",
        f"  a finished run's records          {r['run_bytes_per_finished_run']:>8,} B (the retention)",
        f"  archive copies per finished run   {r['archive_bytes_per_finished_run']:>8,} B "
        "(the archive retention)",
        f"  a session's records               {r['session_bytes_per_session']:>8,} B (kept with the session)",
        "  by key family (MEMORY USAGE, before the overhead):",
        *(
            f"    {name:<24} {f['keys']:>7,} keys {f['bytes']:>11,} B {f['per_finished_run']:>7,} B/run"
            + _kept(name)
            for name, f in r["families"].items()
        ),
    ]
    lines += [
        f"  after the linger (brought forward): all of it per finished run "
        f"{r['used_per_finished_run_after_linger']:,} B, "
        f"a finished run's records {r['run_bytes_after_linger']:,} B",
        "    by key family, per finished run: "
        + ", ".join(f"{k} {v:,}" for k, v in r["families_after_linger"].items()),
        f"  steady state at a linger of {SHIPPED_LINGER_DAYS:g} day in a retention of "
        f"{SHIPPED_RETENTION_DAYS:g}: a finished run's records {r['run_bytes_steady_state']:,} B",
        f"  CONTINUITY_HISTORY: {r['history_copies']:,} runs, {r['history_listings']:,} listed, "
        f"{r['history_messages']:,} messages, {r['history_bytes']:,} B, "
        f"{r['history_bytes_per_run']:,} B per run",
    ]
    if "estimate" in r:
        e = r["estimate"]
        lines.append(
            f"  memory estimate of {e['runs']:,} runs of the same mix: a finished run's records "
            f"{e['run_bytes']:,} B (x{e['overhead']:.2f} included), {e['ratio']:.3f} of the measured; "
            f"a session's {e['session_bytes']:,} B, archive copies {e['archive_bytes_per_run']:,} B per run; "
            f"after the linger {e['run_bytes_after_linger']:,} B, "
            f"{e['ratio_after_linger']:.3f} of the measured"
        )
    lines.append(
        f"  machine: {r['cores']} cores, load average {r['load_average_start']} at start, "
        f"{r['load_average_end']} at end"
    )
    return "\n".join(lines)


def run(
    data_dir: Path, runs: int, mix: str, seed: int | None, warmup: int = 40, linger_s: float = LINGER_S
) -> dict[str, Any]:
    """The whole measurement on servers and services of its own, started and stopped here."""
    stack = Stack(data_dir=data_dir)
    try:
        stack.nats = NatsServer(data_dir / "nats")
        stack.nats.start()
        stack.nats_url = stack.nats.url
        # Redis 7 keeps a latency histogram of about 25 KB per command name once it is used:
        # the server's own, whatever the runs, so off here.
        stack.redis = RedisServer(data_dir / "redis", extra_args=("--latency-tracking", "no"))
        stack.redis.start()
        stack.redis_url = stack.redis.url
        env = {
            "CONTINUITY_LOG_LEVEL": "WARNING",
            "CONTINUITY_TENANCY": "open",
            "CONTINUITY_RUNNER_KEYS": DEMO_KEYS_ENV,
            "CONTINUITY_ARCHIVE_TIMEOUT_S": str(ARCHIVE_TIMEOUT_S),
            "CONTINUITY_RETRY_BACKOFF_S": "0.1",
            "CONTINUITY_HISTORY_LINGER_S": str(linger_s),
        }
        for name in SERVICES:
            stack.start_service(name, env, log_path=data_dir / f"{name}.log")
        stack.wait_ready(60.0)
        return asyncio.run(_measure(stack, runs, warmup, mix, seed, linger_s))
    finally:
        stack.stop()


def compared(result: dict[str, Any], mix: str) -> dict[str, Any]:
    """`continuity memory estimate` of as many runs of the same mix, on a Redis of its own, next to
    the measured figures: its bytes per finished run's records over the measured."""

    async def sample(client: Redis, own: bool) -> estimate.Measurement:
        runs = max(result["finished_runs"], 1)
        return await estimate.measure(client, mix, runs, own_server=own, ids=estimate.Ids(simulated=True))

    m = asyncio.run(estimate.on_own_server(sample))
    run_bytes = m.run_bytes * m.overhead
    kept_bytes = (m.run_bytes - m.lingering_bytes) * m.overhead
    measured = result["run_bytes_per_finished_run"]
    measured_kept = result["run_bytes_after_linger"]
    return {
        "runs": m.runs,
        "run_bytes": round(run_bytes),
        "run_bytes_after_linger": round(kept_bytes),
        "ratio_after_linger": round(kept_bytes / measured_kept, 3) if measured_kept else 0.0,
        "overhead": round(m.overhead, 3),
        "session_bytes": round(m.session_bytes * m.overhead),
        "archive_bytes_per_run": round(m.archive_copies * m.archive_copy_bytes * m.overhead),
        "ratio": round(run_bytes / measured, 3) if measured else 0.0,
    }


def _mix(text: str) -> str:
    try:
        parse_mix(MIXES.get(text, text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("memory", help="Redis bytes per finished run, through the real services")
    p.add_argument("--runs", type=int, default=800, help="runs the simulated runners start (default 800)")
    p.add_argument(
        "--mix",
        type=_mix,
        default="typical",
        help="typical (the simulator's default mix), or the simulator's name=weight,...",
    )
    p.add_argument("--warmup", type=int, default=40, help="runs played before the first reading (default 40)")
    p.add_argument("--seed", type=int, default=7, help="seed of the simulated runners' draws (default 7)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)
    examples(p, "continuity bench memory", "continuity bench memory --runs 200 --json")


def main(args: argparse.Namespace) -> int:
    if args.runs < 1 or args.warmup < 0:
        print("error: --runs must be at least 1 and --warmup at least 0", file=sys.stderr)
        return 2
    started = machine()
    with tempfile.TemporaryDirectory(prefix="continuity-bench-memory-") as tmp:
        result = run(Path(tmp), args.runs, args.mix, args.seed, args.warmup)
    if args.mix in estimate.MIXES:
        result["estimate"] = compared(result, args.mix)
    ended = machine()
    result.update(
        cores=started["cores"],
        load_average_start=started["load_average"],
        load_average_end=ended["load_average"],
    )
    print(msgspec.json.encode(result).decode() if args.json else report(result))
    return 0
