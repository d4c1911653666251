"""Faults beyond the links of test_partitions.py, on the same lab: a NATS node killed and
restarted, a JetStream message block damaged on disk, a service host cut off from Redis or from
NATS alone, a service host whose wall clock is skewed (libfaketime), and the runner load run
around each fault, measured as the partition suite measures it (tests/support/netns_load.py).

A fault here is two steps, each plain or awaited: `apply` (which may wait, say for an election)
and `heal`, with an optional probe run while the fault holds."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import random
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client

from continuity.devstack.servers import nats_server_binary
from continuity.tools.linearizability import Op, check
from shared.contract import Decision, SessionRef, subjects
from shared.contract.client import ContinuityClient
from shared.contract.types import check_time
from tests.support.cluster import read_settled
from tests.support.netns import Host, stop
from tests.support.netns_lab import Lab
from tests.support.netns_load import (
    Decisions,
    EventLoad,
    Measured,
    SessionLoad,
    classifier_consumer_state,
    measure_events,
    measure_sessions,
    recorded_runs,
    stored_runs,
    wait_all_decided,
)
from tests.support.waiting import wait_for

# The partition suite's load and bounds (test_partitions.py), so that the rows compare.
RATE = 20.0
WARMUP_S = 3.0
HOLD_S = 10.0
AFTER_S = 6.0
RESUME_BOUND_S = 45.0
"""Decisions resume within this after the heal: the longest seen here was 33.1 s (F4a, a
follower restarted on a damaged block, on 2.15.1)."""
SESSIONS = 4
WORKERS = 3

LARGER_BUDGET = 1_000_000
"""States searched for a session the partition suite's budget (100,000) left undecided: about
15 s of search here."""
GAVE_UP = "the search budget ran out"

Step = Callable[[], Awaitable[None] | None]


async def _do(step: Step) -> None:
    done = step()
    if inspect.isawaitable(done):
        await done


async def connect_runners(lab: Lab) -> list[Client]:
    """Runners spread over the nodes: one connection preferring each (as test_partitions)."""
    urls = lab.nats_url.split(",")
    return [
        await nats.connect(
            urls[i:] + urls[:i],
            dont_randomize=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.2,
            ping_interval=1,
            max_outstanding_pings=3,
        )
        for i in range(len(urls))
    ]


def spread_sessions() -> list[SessionRef]:
    tag = uuid.uuid4().hex[:6]
    return [
        SessionRef(tenant="acme", conversation_id=f"chaos-{tag}-{i}", agent_id="codex")
        for i in range(SESSIONS)
    ]


# One fault under load ------------------------------------------------------------------------


@dataclass
class Run:
    """A fault's figures and what the runner sent, for checks beyond the table's."""

    measured: Measured
    runner: str
    events: EventLoad
    fault_at: float
    healed_at: float
    history: dict[str, list[Op]]
    """The sessions' history, as the checker read it."""
    decisions: Decisions


async def run_fault(
    conns: list[Client],
    name: str,
    apply: Step,
    heal: Step,
    sessions: list[SessionRef],
    *,
    hold_s: float = HOLD_S,
    during: Callable[[], Awaitable[None]] | None = None,
    recheck: int = LARGER_BUDGET,
) -> Run:
    """The load, the fault applied after WARMUP_S, held `hold_s` from when `apply` returned
    (`during` runs meanwhile), healed, AFTER_S more of load, then measured; with `recheck`, a
    session left undecided is searched again with LARGER_BUDGET (not for a fault expected to
    break linearizability, where the larger search would run out at every session)."""
    runner = f"chaos-{uuid.uuid4().hex[:10]}"
    clients = [ContinuityClient(nc, timeout=2.0) for nc in conns]
    # A tenant per fault: the load of the faults before does not spend its recovery budget.
    events = EventLoad(conns, runner, RATE, tenant=runner)
    requests = SessionLoad(clients, sessions, WORKERS, seed=hash(name) & 0xFFFF)
    stop_load, done = asyncio.Event(), asyncio.Event()
    follower = asyncio.ensure_future(events.follow(done))
    load = asyncio.gather(events.run(stop_load), requests.run(stop_load))
    healed = False
    try:
        await asyncio.sleep(WARMUP_S)
        fault_at = time.time()
        await _do(apply)
        await asyncio.gather(asyncio.sleep(hold_s), during() if during else asyncio.sleep(0))
        await _do(heal)
        healed = True
        healed_at = time.time()
        await asyncio.sleep(AFTER_S)
    finally:
        if not healed:
            await _do(heal)
        stop_load.set()
        await load
    try:
        decisions = await wait_all_decided(conns[0], runner, events.acked, timeout=60)
    finally:
        done.set()
        await follower
    m = Measured(name, healed_at=healed_at)
    measure_events(m, events, decisions, fault_at, healed_at)
    if m.lost:
        await _explain_lost(m, conns[0], runner, events, decisions.per_run)
    if events.resent:
        await _explain_resent(m, conns[0], runner, events, decisions)
    measure_sessions(m, requests.history)
    if recheck:
        decide_undecided(m, requests.history, recheck)
    print(f"\n{name}: {requests.undelivered} session requests reached no session-store (no responders)")
    return Run(m, runner, events, fault_at, healed_at, requests.history, decisions)


async def _explain_resent(
    m: Measured, nc: Client, runner: str, events: EventLoad, decisions: Decisions
) -> None:
    """Sent again for want of a decision: was the first copy stored, and did the decision come
    only after the report was sent again (the first copy never decided)?"""
    stored = await stored_runs(nc, runner)
    late = [r for r in events.resent if decisions.first_at.get(r, 0.0) >= events.first_resent_at[r]]
    m.details.append(
        f"sent again: {len(events.resent)}; decided only after: {len(late)}, of which the "
        f"events stream holds a first copy at {sorted(stored[r] for r in late if r in stored)}"
    )
    print(f"\n{m.fault}: {m.details[-1]}")


async def _explain_lost(m: Measured, nc: Client, runner: str, events: EventLoad, per_run: Any) -> None:
    """Where the undecided went: in the events stream or not, recorded in Redis or not."""
    stored = await stored_runs(nc, runner)
    missing = [r for r in events.acked if (r, 1) not in per_run]
    m.stored_undecided = sum(r in stored for r in missing)
    recorded = await recorded_runs(nc, missing)
    m.details.append(
        f"of the {m.lost} undecided, {m.stored_undecided} are in the events stream and "
        f"{len(recorded)} have a decision recorded in Redis"
    )
    m.details.append(f"their stream sequences: {sorted(stored[r] for r in missing if r in stored)}")
    m.details.append(await classifier_consumer_state(nc))


def decide_undecided(m: Measured, history: dict[str, list[Op]], budget: int = LARGER_BUDGET) -> None:
    """Sessions whose search gave up at the partition suite's budget (undecided, counted as not
    linearizable) searched again with a larger one: a fault that leaves many writes without an
    answer (a service cut off from Redis) multiplies the orders to try."""
    for key, ops in history.items():
        if f"{key}: {GAVE_UP}" not in m.details:
            continue
        verdict = check(ops, budget=budget)
        if verdict.linearizable is True:
            m.sessions_not_linearizable -= 1
            m.details.remove(f"{key}: {GAVE_UP}")
            print(f"\n{m.fault}: {key} linearizable, decided at {verdict.explored} states")
        elif verdict.linearizable is False:
            m.details[m.details.index(f"{key}: {GAVE_UP}")] = f"{key}: {verdict.detail}"


def assert_clean(m: Measured, *, sessions: bool = True) -> None:
    """The partition suite's checks (test_partitions.assert_clean)."""
    assert m.acked > 0 and m.decided >= m.acked - m.lost
    assert m.lost == 0, f"{m.lost} acknowledged events got no decision: {m.details}"
    assert m.doubled == 0, f"{m.doubled} decisions doubled"
    assert m.resumed_s <= RESUME_BOUND_S, f"decisions resumed {m.resumed_s:.1f} s after the heal"
    if sessions:
        assert m.reverted == 0, f"{m.reverted} answers showed a revision older than one seen before"
        assert m.lost_commits == 0, f"{m.lost_commits} acknowledged commits lost"
        assert m.sessions_not_linearizable == 0, m.details


# NATS nodes ----------------------------------------------------------------------------------


def nats_process(lab: Lab, index: int) -> subprocess.Popen[bytes]:
    host = lab.nats[index]
    binary = nats_server_binary()
    return next(p for p in host.procs if p.poll() is None and binary in map(str, p.args))  # type: ignore[arg-type]


def kill_nats(lab: Lab, index: int) -> None:
    """`kill -9` of the node's server: no shutdown, no flush of its own."""
    proc = nats_process(lab, index)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    lab.nats[index].procs.remove(proc)


def stop_nats(lab: Lab, index: int) -> None:
    """The node's server stopped as an operator stops it (SIGTERM)."""
    proc = nats_process(lab, index)
    stop(proc)
    lab.nats[index].procs.remove(proc)


def start_nats(lab: Lab, index: int) -> None:
    """The node started again on its configuration and store (Lab.start_nats wrote both)."""
    conf = lab.data / f"nats-{index}" / "nats.conf"
    lab.nats[index].popen([nats_server_binary(), "-c", str(conf)], lab.data / f"nats-{index}.log")


def health(host: Host) -> str | None:
    """None when the node answers `/healthz` 200, else what it says is wrong."""
    try:
        with urllib.request.urlopen(f"http://{host.ip}:8222/healthz", timeout=2) as reply:
            return None if reply.status == 200 else reply.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.read().decode(errors="replace")
    except OSError as err:
        return type(err).__name__


CURRENT_BOUND_S = 30.0
"""Every NATS node current within this of the heal, or the nodes still behind are restarted
(docs/protocol.md, "NATS releases": on 2.15.1 the old leader of a stream can take minutes to
repair its log after a partition; a restart ends it)."""


STEADY_S = 5.0
"""How long every node must answer healthy in a row to count as current: a node repairing its
log answers healthy between two of its catch-up rounds."""


async def settle_nats(lab: Lab, m: Measured) -> None:
    """Every NATS node current again before the next fault, measured from the heal into
    `m.current`; a node still behind at CURRENT_BOUND_S is restarted, as an operator would
    (docs/operations/runbooks.md), and the table says so. A node a restart does not bring back
    fails the fault."""
    healthy_since: float | None = None
    while (now := time.time()) - m.healed_at < CURRENT_BOUND_S:
        if any(health(h) is not None for h in lab.nats):
            healthy_since = None
        elif healthy_since is None:
            healthy_since = now
        elif now - healthy_since >= STEADY_S:
            m.current = f"{healthy_since - m.healed_at:.1f}"
            return
        await asyncio.sleep(0.5)  # polling the nodes' health endpoints
    behind = {i: said for i, h in enumerate(lab.nats) if (said := health(h)) is not None}
    for i in behind:
        restart_nats(lab, i)
    await healthy_after_restarts(lab)
    names = ",".join(lab.nats[i].name for i in behind)
    m.current = f">{CURRENT_BOUND_S:.0f}, restarted {names}"
    m.details.append(f"behind {CURRENT_BOUND_S:.0f} s after the heal: {behind}")


async def healthy_after_restarts(lab: Lab) -> None:
    """Every node healthy within 90 s of its restart; a node still behind then is restarted once
    more (seen once on 2.15.1: a restarted node that did not catch up), and must be within 90 s."""
    with contextlib.suppress(AssertionError):
        await lab.wait_nats_healthy(timeout=90)
        return
    for i in [i for i, h in enumerate(lab.nats) if health(h) is not None]:
        restart_nats(lab, i)
    await lab.wait_nats_healthy(timeout=90)


def restart_nats(lab: Lab, index: int) -> None:
    """A node stopped (if it runs) and started again on its store."""
    if any(p.poll() is None for p in lab.nats[index].procs):
        stop_nats(lab, index)
    start_nats(lab, index)


async def repair_nats(lab: Lab) -> list[str]:
    """A node left unhealthy by an earlier fault restarted, so that the next fault starts on a
    healthy cluster (a restart ends the stuck catch-up seen on 2.15.1); the nodes restarted."""
    with contextlib.suppress(AssertionError):
        await lab.wait_nats_healthy(timeout=20)
        return []
    stuck = [i for i, h in enumerate(lab.nats) if health(h) is not None]
    for i in stuck:
        restart_nats(lab, i)
    await healthy_after_restarts(lab)
    return [lab.nats[i].name for i in stuck]


def jsz_stream(host: Host, stream: str) -> dict[str, Any] | None:
    """The stream as one node holds it (its monitoring port): state and cluster view."""
    url = f"http://{host.ip}:8222/jsz?streams=true"
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            body = json.loads(reply.read())
    except (OSError, ValueError):
        return None
    for account in body.get("account_details") or []:
        for detail in account.get("stream_detail") or []:
            if detail.get("name") == stream:
                found: dict[str, Any] = detail
                return found
    return None


def leader_seen_by(host: Host, stream: str) -> str | None:
    detail = jsz_stream(host, stream)
    return ((detail or {}).get("cluster") or {}).get("leader")


async def make_leader(lab: Lab, nc: Client, host: Host, stream: str = subjects.EVENTS_STREAM) -> None:
    """Step the stream's leader down, preferring `host`, until `host` leads."""
    subject = f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}"
    body = json.dumps({"placement": {"preferred": host.name}}).encode()

    async def leads() -> bool:
        try:
            if (await lab.stream_leader(nc, stream)) is host:
                return True
            await nc.request(subject, body, timeout=2)
        except (nats.errors.Error, TimeoutError, AssertionError):
            pass
        return False

    await wait_for(leads, timeout=60, interval=1.0, what=f"{host.name} leading {stream}")


# JetStream's files -----------------------------------------------------------------------------


def stream_blocks(lab: Lab, index: int, stream: str = subjects.EVENTS_STREAM) -> list[Path]:
    """The message blocks of `stream` in node `index`'s store, oldest first."""
    store = lab.data / f"nats-{index}" / "js"
    found = [p for p in store.rglob("*.blk") if p.parent.name == "msgs" and p.parent.parent.name == stream]
    return sorted(found, key=lambda p: int(p.stem))


def truncate_block(path: Path) -> str:
    """The block cut to half its size, as a write the disk never finished."""
    size = path.stat().st_size
    os.truncate(path, size // 2)
    return f"{path.name} truncated from {size} to {size // 2} bytes"


def corrupt_block(path: Path, span: int = 4096) -> str:
    """`span` bytes in the block's middle overwritten with noise, its size unchanged."""
    size = path.stat().st_size
    at = max(0, size // 2 - span // 2)
    noise = random.Random(size).randbytes(min(span, size - at))
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(noise)
    return f"{path.name}: {len(noise)} bytes at {at} of {size} overwritten"


async def wait_caught_up(lab: Lab, index: int, stream: str = subjects.EVENTS_STREAM) -> dict[str, Any]:
    """Until node `index` holds the stream as its leader does (messages, first and last
    sequence); both states."""
    states: dict[str, Any] = {}

    def same() -> bool:
        leader = next((leader_seen_by(h, stream) for h in lab.nats if leader_seen_by(h, stream)), None)
        if leader is None:
            return False
        ours = jsz_stream(lab.nats[index], stream)
        theirs = jsz_stream(lab.nats[int(leader.removeprefix("n"))], stream)
        if ours is None or theirs is None:
            return False
        keys = ("messages", "first_seq", "last_seq")
        states.update(node={k: ours["state"][k] for k in keys}, leader={k: theirs["state"][k] for k in keys})
        return bool(states["node"] == states["leader"])

    await wait_for(same, timeout=90, interval=0.5, what=f"n{index} holding {stream} as its leader does")
    return states


def log_lines(lab: Lab, index: int, since: int, words: tuple[str, ...]) -> list[str]:
    """The node's log lines after byte `since` that name one of `words` (what it made of a
    damaged file)."""
    with open(lab.data / f"nats-{index}.log", "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines() if any(w in line.lower() for w in words)]


# Clocks -------------------------------------------------------------------------------------------


def faketime_library() -> str:
    """libfaketime (Debian's `faketime`): a process that preloads it reads a shifted wall clock."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        raise RuntimeError("libfaketime is missing: apt-get install faketime (make chaos does)")
    return str(found[0])


def skewed(skew_s: int) -> dict[str, str]:
    """The environment of a process whose wall clock is `skew_s` off; its monotonic clock, which
    a real skewed host would not shift either, left alone."""
    return {
        "LD_PRELOAD": faketime_library(),
        "FAKETIME": f"{skew_s:+d}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


async def restart_service(lab: Lab, name: str, **env: str) -> None:
    lab.stop_service(name)
    lab.start_service(name, **env)
    await lab.wait_ready((name,))


@dataclass
class StoredDecision:
    decision: Decision
    stored_at: float
    """When the decisions stream stored it (the NATS server's clock, not skewed)."""


async def decisions_of(nc: Client, runner: str) -> list[StoredDecision]:
    """`runner`'s decisions as the contract's Struct decodes them, each with its stored time; a
    decision whose times are not real UTC instants (contract 9.8) fails here."""
    msgs = await read_settled(nc.jetstream(), subjects.DECISIONS_STREAM, subjects.decisions(runner))
    out = []
    for m in msgs:
        d = msgspec.json.decode(m.data, type=Decision)
        check_time(d.decided_at, d.not_before)
        assert m.time is not None
        out.append(StoredDecision(d, m.time.timestamp()))
    return out


def epoch_of(rfc3339: str) -> float:
    """Seconds since the epoch of a contract time (`...Z` or `+00:00`)."""
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
