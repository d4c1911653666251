"""Partitions under load: each fault is applied while runners publish resume failures and
commit, decide, reject and read sessions, held, then healed. After each: no acknowledged event
lost, exactly one decision per (run_id, attempt), no session record gone back to an older
revision, every session's history linearizable, and decisions resumed within a bound.

Faults: (1) the events stream's leader cut off from the other NATS nodes; (2) that leader's
packets to the others dropped, theirs still arriving; (3) 30% loss and 200 ms delay on its
link; (4) the Redis master of the sessions cut off from its cluster (its clients still reach
it) and failed over to its replica, without and with CONTINUITY_REDIS_WAIT_REPLICAS=1.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client

from continuity.tools.linearizability import Get, Op, Record, Seen, check_history
from shared.contract import SessionRef
from shared.contract.client import ContinuityClient
from shared.platform.redis.slots import key_slot
from shared.records import keys
from shared.records.session import READ_FIELDS, StoredSession
from tests.support.netns import Host
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
    session_on,
    stored_runs,
    wait_all_decided,
)

pytestmark = pytest.mark.asyncio

RATE = 20.0
"""Resume failures a second: a steady fleet, well within what two cores decide."""
WARMUP_S = 3.0
"""Load before the fault (deliberate): the pause is measured against a steady flow."""
HOLD_S = 10.0
"""How long each fault is held (deliberate)."""
AFTER_S = 6.0
"""Load after the heal (deliberate), so that decisions are seen to resume."""
RESUME_BOUND_S = 30.0
"""Decisions resume within this after the heal: the longest seen here was 18.1 s (fault 2)."""
SESSIONS = 4
WORKERS = 3

histories: dict[str, dict[str, list[Op]]] = {}
"""Each fault's session history, for the planted-violation test."""
decisions_seen: dict[str, Decisions] = {}


@pytest.fixture(scope="module")
async def conns(lab: Lab) -> AsyncIterator[list[Client]]:
    """Runners spread over the nodes: one connection preferring each."""
    import nats

    urls = lab.nats_url.split(",")
    made = [
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
    yield made
    for nc in made:
        await nc.close()


async def run_fault(
    lab: Lab,
    conns: list[Client],
    name: str,
    apply: Callable[[], None],
    heal: Callable[[], None],
    sessions: list[SessionRef],
    *,
    hold_s: float = HOLD_S,
) -> Measured:
    runner = f"chaos-{uuid.uuid4().hex[:10]}"
    clients = [ContinuityClient(nc, timeout=2.0) for nc in conns]
    events = EventLoad(conns, runner, RATE)
    requests = SessionLoad(clients, sessions, WORKERS, seed=hash(name) & 0xFFFF)
    stop, done = asyncio.Event(), asyncio.Event()
    follower = asyncio.ensure_future(events.follow(done))
    load = asyncio.gather(events.run(stop), requests.run(stop))
    healed = False
    try:
        await asyncio.sleep(WARMUP_S)
        fault_at = time.time()
        apply()
        await asyncio.sleep(hold_s)
        heal()
        healed = True
        healed_at = time.time()
        await asyncio.sleep(AFTER_S)
    finally:
        if not healed:
            heal()
        stop.set()
        await load
    try:
        decisions = await wait_all_decided(conns[0], runner, events.acked, timeout=60)
    finally:
        done.set()
        await follower
    m = Measured(name)
    measure_events(m, events, decisions, fault_at, healed_at)
    if m.lost:
        # Lost where: stored in the events stream but never decided, or not stored at all; and
        # whether the classifier recorded a decision (its publication acknowledged, then not in
        # the decisions stream) or never handled the event.
        stored = await stored_runs(conns[0], runner)
        missing = [r for r in events.acked if (r, 1) not in decisions.per_run]
        m.stored_undecided = sum(r in stored for r in missing)
        recorded = await recorded_runs(conns[0], missing)
        m.details.append(
            f"of the {m.lost} undecided, {m.stored_undecided} are in the events stream and "
            f"{len(recorded)} have a decision recorded in Redis"
        )
        m.details.append(f"their stream sequences: {sorted(stored[r] for r in missing if r in stored)}")
        m.details.append(await classifier_consumer_state(conns[0]))
    if events.resent:
        # Sent again for want of a decision: was the first copy stored, and did the decision come
        # only after the report was sent again (the first copy never decided)?
        stored = await stored_runs(conns[0], runner)
        late = [r for r in events.resent if decisions.first_at.get(r, 0.0) >= events.first_resent_at[r]]
        m.details.append(
            f"sent again: {len(events.resent)}; decided only after: {len(late)}, of which the "
            f"events stream holds a first copy at {sorted(stored[r] for r in late if r in stored)}"
        )
        print(f"\n{name}: {m.details[-1]}")
    measure_sessions(m, requests.history)
    histories[name] = requests.history
    decisions_seen[name] = decisions
    return m


def assert_clean(m: Measured, *, sessions: bool = True) -> None:
    """Every check of a fault's figures."""
    assert m.acked > 0 and m.decided >= m.acked - m.lost
    assert m.lost == 0, f"{m.lost} acknowledged events got no decision: {m.details}"
    assert m.doubled == 0, f"{m.doubled} decisions doubled"
    assert m.resumed_s <= RESUME_BOUND_S, f"decisions resumed {m.resumed_s:.1f} s after the heal"
    if sessions:
        assert m.reverted == 0, f"{m.reverted} answers showed a revision older than one seen before"
        assert m.lost_commits == 0, f"{m.lost_commits} acknowledged commits lost"
        assert m.sessions_not_linearizable == 0, m.details


def spread_sessions(tag: str) -> list[SessionRef]:
    return [
        SessionRef(tenant="acme", conversation_id=f"chaos-{tag}-{i}", agent_id="codex")
        for i in range(SESSIONS)
    ]


def others(hosts: list[Host], one: Host) -> list[Host]:
    return [h for h in hosts if h is not one]


async def test_1_the_events_leader_cut_off_from_the_majority(
    lab: Lab, conns: list[Client], table: list[Measured]
) -> None:
    leader = await lab.stream_leader(conns[0])
    m = await run_fault(
        lab, conns, f"1 events leader {leader.name} cut off",
        lambda: leader.cut(others(lab.nats, leader)), leader.heal, spread_sessions(uuid.uuid4().hex[:6]),
    )  # fmt: skip
    table.append(m)
    await lab.wait_nats_healthy()
    assert_clean(m)


async def test_2_an_asymmetric_partition(lab: Lab, conns: list[Client], table: list[Measured]) -> None:
    leader = await lab.stream_leader(conns[0])
    m = await run_fault(
        lab, conns, f"2 {leader.name} -> others dropped (one way)",
        lambda: leader.drop_outgoing(others(lab.nats, leader)), leader.heal,
        spread_sessions(uuid.uuid4().hex[:6]),
    )  # fmt: skip
    table.append(m)
    await lab.wait_nats_healthy()
    assert_clean(m)


async def test_3_loss_and_delay_on_one_link(lab: Lab, conns: list[Client], table: list[Measured]) -> None:
    leader = await lab.stream_leader(conns[0])
    m = await run_fault(
        lab, conns, f"3 30% loss, 200 ms on {leader.name}",
        lambda: leader.degrade(0.3, 200), leader.heal, spread_sessions(uuid.uuid4().hex[:6]),
    )  # fmt: skip
    table.append(m)
    await lab.wait_nats_healthy()
    assert_clean(m)


async def _failover(lab: Lab, conns: list[Client], name: str) -> Measured:
    """The Redis master of the load's sessions cut off from the other Redis nodes (the services
    still reach it), its replica promoted, then the old master back as a replica."""
    tag = uuid.uuid4().hex[:6]
    probe = SessionRef(tenant="acme", conversation_id=f"chaos-{tag}-probe", agent_id="codex")
    master = lab.master_of_slot(key_slot(keys.session(probe.key)))
    sessions = session_on(
        lambda s: lab.master_of_slot(key_slot(keys.session(s.key))) is master, tag, SESSIONS
    )
    replica = lab.replicas_of(master)[0]
    m = await run_fault(
        lab, conns, name, lambda: master.cut(others(lab.redis, master)), master.heal, sessions
    )
    await lab.wait_redis_ok()
    # The replica took over, the old master follows it.
    assert lab.role(replica) == "master" and lab.role(master) == "slave"
    return m


async def test_4a_a_redis_failover_without_wait(lab: Lab, conns: list[Client], table: list[Measured]) -> None:
    m = await _failover(lab, conns, "4a redis master failover, WAIT off")
    table.append(m)
    assert_clean(m, sessions=False)
    # What a failover loses, the checker sees: each lost commit is a session it rejects.
    assert (m.lost_commits > 0) <= (m.sessions_not_linearizable > 0)


async def test_4b_a_redis_failover_with_wait(lab: Lab, conns: list[Client], table: list[Measured]) -> None:
    lab.stop_service("session-store")
    lab.service_env = {"CONTINUITY_REDIS_WAIT_REPLICAS": "1", "CONTINUITY_REDIS_WAIT_TIMEOUT_MS": "200"}
    lab.start_service("session-store")
    await lab.wait_ready(("session-store",))
    m = await _failover(lab, conns, "4b redis master failover, WAIT 1")
    table.append(m)
    assert_clean(m, sessions=False)
    assert m.lost_commits == 0, "WAIT: no acknowledged commit is lost in a failover"


async def test_a_stale_read_path_during_replica_lag_is_caught(
    lab: Lab, conns: list[Client], table: list[Measured]
) -> None:
    """Planted in this test alone: gets answered from a Redis replica cut off from its master
    (READONLY), while commits go to the master. The checker must reject those histories."""
    tag = uuid.uuid4().hex[:6]
    probe = SessionRef(tenant="acme", conversation_id=f"chaos-{tag}-probe", agent_id="codex")
    master = lab.master_of_slot(key_slot(keys.session(probe.key)))
    sessions = session_on(
        lambda s: lab.master_of_slot(key_slot(keys.session(s.key))) is master, tag, SESSIONS
    )
    replica = lab.replicas_of(master)[0]
    # One connection, so that READONLY holds for every read.
    stale = aioredis.Redis(host=replica.ip, port=6379, single_connection_client=True)
    await stale.execute_command("READONLY")

    async def from_replica(session: SessionRef) -> Record | None:
        values = await stale.hmget(keys.session(session.key), list(READ_FIELDS))  # type: ignore[misc]
        if not any(v is not None for v in values):
            return None
        s = StoredSession.from_values(values)
        return Record(s.handle, s.revision, s.epoch, s.state)  # type: ignore[arg-type]

    clients = [ContinuityClient(nc, timeout=2.0) for nc in conns]
    load = SessionLoad(clients, sessions, WORKERS, reader=from_replica)
    stop = asyncio.Event()
    running = asyncio.ensure_future(load.run(stop))
    try:
        await asyncio.sleep(WARMUP_S)
        # The replica stops hearing its master: no failover (the other masters still see it).
        replica.cut([master])
        await asyncio.sleep(HOLD_S / 2)
    finally:
        replica.heal()
        stop.set()
        await running
        await stale.aclose()
    m = Measured("planted: gets from a lagging replica")
    measure_sessions(m, load.history)
    table.append(m)
    assert m.sessions_not_linearizable > 0, "the checker missed reads from a lagging replica"
    with contextlib.suppress(Exception):
        await lab.wait_redis_ok()


async def test_the_checks_fail_on_a_planted_violation(lab: Lab) -> None:
    """The assertions above can fail: a doubled decision and a reverted read, planted into what
    fault 1 recorded, are both found."""
    name = next(k for k in histories if k.startswith("1 "))
    history = histories[name]
    key, ops = next(
        (k, v)
        for k, v in history.items()
        if any(isinstance(op.answer, Seen) and op.answer.record for op in v)
    )
    last = max(ops, key=lambda op: op.completed if op.completed != float("inf") else 0)
    reverted = Op(Get(), Seen(Record("h-planted", 1, 0)), last.completed + 1, last.completed + 2)
    assert check_history({key: [*ops, reverted]})[key].linearizable is not True
    m = Measured("planted")
    measure_sessions(m, {key: [*ops, reverted]})
    with pytest.raises(AssertionError):
        assert_clean(replace(m, acked=1, decided=1))
    doubled = decisions_seen[name]
    twice = Decisions(doubled.per_run.copy(), doubled.stored_at)
    run = next(iter(twice.per_run))
    twice.per_run[run] += 1
    assert sum(n - 1 for n in twice.per_run.values() if n > 1) == 1
