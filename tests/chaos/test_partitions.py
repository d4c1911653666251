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
import uuid
from collections.abc import AsyncIterator
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
from tests.support.netns_faults import (
    HOLD_S,
    LARGER_BUDGET,
    SESSIONS,
    WARMUP_S,
    WORKERS,
    Step,
    assert_clean,
    connect_runners,
    restart_service,
    run_fault,
    settle_nats,
)
from tests.support.netns_lab import Lab
from tests.support.netns_load import Decisions, Measured, SessionLoad, measure_sessions, session_on

pytestmark = pytest.mark.asyncio

histories: dict[str, dict[str, list[Op]]] = {}
"""Each fault's session history, for the planted-violation test."""
decisions_seen: dict[str, Decisions] = {}


@pytest.fixture(scope="module")
async def conns(lab: Lab) -> AsyncIterator[list[Client]]:
    """Runners spread over the nodes: one connection preferring each."""
    made = await connect_runners(lab)
    yield made
    for nc in made:
        await nc.close()


async def partition(
    conns: list[Client],
    name: str,
    apply: Step,
    heal: Step,
    sessions: list[SessionRef],
    *,
    recheck: bool = True,
) -> Measured:
    """One fault under the load (tests/support/netns_faults.py), its history and decisions kept
    for the planted-violation test. Without `recheck` (a fault expected to break
    linearizability), an undecided session is not searched again."""
    run = await run_fault(conns, name, apply, heal, sessions, recheck=LARGER_BUDGET if recheck else 0)
    histories[name] = run.history
    decisions_seen[name] = run.decisions
    return run.measured


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
    m = await partition(
        conns, f"1 events leader {leader.name} cut off",
        lambda: leader.cut(others(lab.nats, leader)), leader.heal, spread_sessions(uuid.uuid4().hex[:6]),
    )  # fmt: skip
    await settle_nats(lab, m)
    table.append(m)
    assert_clean(m)


async def test_2_an_asymmetric_partition(lab: Lab, conns: list[Client], table: list[Measured]) -> None:
    leader = await lab.stream_leader(conns[0])
    m = await partition(
        conns, f"2 {leader.name} -> others dropped (one way)",
        lambda: leader.drop_outgoing(others(lab.nats, leader)), leader.heal,
        spread_sessions(uuid.uuid4().hex[:6]),
    )  # fmt: skip
    await settle_nats(lab, m)
    table.append(m)
    assert_clean(m)


async def test_3_loss_and_delay_on_one_link(lab: Lab, conns: list[Client], table: list[Measured]) -> None:
    leader = await lab.stream_leader(conns[0])
    m = await partition(
        conns, f"3 30% loss, 200 ms on {leader.name}",
        lambda: leader.degrade(0.3, 200), leader.heal, spread_sessions(uuid.uuid4().hex[:6]),
    )  # fmt: skip
    await settle_nats(lab, m)
    table.append(m)
    assert_clean(m)


async def _failover(lab: Lab, conns: list[Client], name: str, *, recheck: bool = True) -> Measured:
    """The Redis master of the load's sessions cut off from the other Redis nodes (the services
    still reach it), its replica promoted, then the old master back as a replica."""
    tag = uuid.uuid4().hex[:6]
    probe = SessionRef(tenant="acme", conversation_id=f"chaos-{tag}-probe", agent_id="codex")
    master = lab.master_of_slot(key_slot(keys.session(probe.key)))
    sessions = session_on(
        lambda s: lab.master_of_slot(key_slot(keys.session(s.key))) is master, tag, SESSIONS
    )
    replica = lab.replicas_of(master)[0]
    m = await partition(
        conns, name, lambda: master.cut(others(lab.redis, master)), master.heal, sessions, recheck=recheck
    )
    await lab.wait_redis_ok()
    # The replica took over, the old master follows it.
    assert lab.role(replica) == "master" and lab.role(master) == "slave"
    return m


async def test_4a_a_redis_failover_without_wait(lab: Lab, conns: list[Client], table: list[Measured]) -> None:
    m = await _failover(lab, conns, "4a redis master failover, WAIT off", recheck=False)
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
    # No acknowledged commit lost (WAIT), and no read of one a failover then lost (the fence):
    # every history linearizable.
    assert_clean(m)


async def test_a_stale_read_path_during_replica_lag_is_caught(
    lab: Lab, conns: list[Client], table: list[Measured]
) -> None:
    """Planted in this test alone: gets answered from a Redis replica cut off from its master
    (READONLY), while commits go to the master. The checker must reject those histories. The
    session-store runs without WAIT here: with it, no commit is acknowledged while the replica
    lags, and a history with nothing acknowledged for the replica to miss is linearizable."""
    lab.service_env = {}
    await restart_service(lab, "session-store")
    tag = uuid.uuid4().hex[:6]
    probe = SessionRef(tenant="acme", conversation_id=f"chaos-{tag}-probe", agent_id="codex")
    master = lab.master_of_slot(key_slot(keys.session(probe.key)))
    sessions = session_on(
        lambda s: lab.master_of_slot(key_slot(keys.session(s.key))) is master, tag, SESSIONS
    )
    replica = lab.replicas_of(master)[0]
    # One connection, so that READONLY holds for every read.
    stale = aioredis.Redis(host=replica.ip, port=6379, single_connection_client=True)
    await stale.execute_command("READONLY")  # type: ignore[no-untyped-call]

    async def from_replica(session: SessionRef) -> Record | None:
        values: list[bytes | None] = await stale.hmget(keys.session(session.key), list(READ_FIELDS))  # type: ignore[misc,assignment]
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
