"""A report sent again publishes its decision at most once (contract 4.5, 9.13), on real NATS and
Redis: what a runner's core subscription on its subjects receives, not only what the stream
keeps after its duplicate window. Copies handled at the same time leave the publication to the
first handling; one whose first handling died between its step and its publication publishes
that step's messages itself, once, and never against a sweeper."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from continuity_runner import RunnerOptions, connect
from nats.aio.client import Client
from nats.aio.msg import Msg

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from services.classifier.handler import EventHandler
from shared.contract import CommandResult, Decision, ResumeFailed, SessionRef, TurnCompleted, subjects
from shared.contract.signing import sign
from shared.contract.times import now_rfc3339
from shared.platform.bus.consumer import PullConsumer
from shared.platform.bus.streams import ensure_streams
from shared.platform.redis import Redis
from shared.records import keys
from shared.records.decisions import decision_audit
from shared.records.outbox import Outbox, OutboxEntry
from shared.records.steps import RunStep, run_fields
from shared.records.store import RunStore
from tests.support import (
    KEYS,
    Bus,
    make_config,
    new_runner_id,
    new_session,
    resume_failed,
    running,
    seed_session,
    tool_call,
    wait_for,
)

pytestmark = pytest.mark.asyncio

COPIES = 3
GRACE_S = 5.0
"""The outbox's grace period (`Outbox`'s default, as the classifier runs it)."""


class Heard:
    """What core subscriptions receive on a runner's subjects, message by message."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.ids: Counter[str] = Counter()
        self._subs: list[object] = []

    async def listen(self, *subject_names: str) -> None:
        async def on(msg: Msg) -> None:
            self.ids[(msg.headers or {}).get("Nats-Msg-Id", "")] += 1

        for name in subject_names:
            self._subs.append(await self.nc.subscribe(name, cb=on))
        await self.nc.flush()

    async def settled(self) -> Counter[str]:
        """Everything published before this call has reached the callbacks: one round trip to
        the server, then the client's queue handed on."""
        await self.nc.flush()
        await self.nc.flush()
        return self.ids


@pytest.fixture(scope="module")
def own_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A NATS server of this module's own: the classifier's durable consumer is this module's."""
    server = NatsServer(tmp_path_factory.mktemp("decision-once-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def classifier(own_nats: NatsServer, redis_server: RedisServer) -> AsyncIterator[None]:
    config = make_config(own_nats.url, redis_server.url, runner_keys=KEYS)
    async with running(registry.load("classifier"), config):
        yield


@pytest.fixture
async def nc(own_nats: NatsServer, classifier: None) -> AsyncIterator[Client]:
    client = await nats.connect(own_nats.url)
    yield client
    await client.close()


@pytest.fixture
async def r(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


def copies(event: ResumeFailed, n: int = COPIES) -> list[ResumeFailed]:
    """The same report sent `n` times, each under its own `event_id` (contract 9.13)."""
    return [msgspec.structs.replace(event, event_id=f"ev-{uuid.uuid4().hex}") for _ in range(n)]


async def publish_all(bus: Bus, events: list[ResumeFailed]) -> int:
    seq = 0
    for event in events:
        seq = await bus.publish(event, msg_id=event.event_id)
    return seq


@pytest.mark.parametrize("kind", ["operator", "reconcile", "retry", "archive"])
async def test_copies_of_a_report_reach_the_runners_subject_once(
    nc: Client, r: aioredis.Redis, kind: str
) -> None:
    bus = Bus(nc.jetstream())
    runner, session = new_runner_id(), new_session()
    if kind == "archive":
        await seed_session(r, session, "allow_replacement_after_resume_failure")
        event = resume_failed(runner, session=session, error=None)
    elif kind == "reconcile":
        event = resume_failed(runner, session=session, pending=tool_call())
    elif kind == "operator":
        event = resume_failed(runner, session=session, classification="provider_attach_refused")
    else:
        event = resume_failed(runner, session=session)
    heard = Heard(nc)
    await heard.listen(subjects.decisions(runner), subjects.WORK_ARCHIVE, subjects.WORK_RECONCILE)

    # Back to back: the copies are handled while the first handling is still publishing.
    await bus.settled(await publish_all(bus, copies(event)))
    run = f"{event.run_id}:1:"
    expected = {
        "operator": {f"{run}operator": 1},
        "reconcile": {f"{run}reconcile": 1, f"work:{run}reconcile": 1},
        "retry": {f"{run}retry_same_session": 1},
        "archive": {f"work:{run}archive": 1},
    }[kind]
    heard_ids = await heard.settled()
    assert {k: v for k, v in heard_ids.items() if event.run_id in k} == expected
    assert await r.hlen(keys.outbox(session.key)) == 0  # type: ignore[misc]

    # One by one, each after the previous one was handled: still nothing more on the wire.
    for copy in copies(event, 2):
        await bus.settled(await bus.publish(copy, msg_id=copy.event_id))
    heard_ids = await heard.settled()
    assert {k: v for k, v in heard_ids.items() if event.run_id in k} == expected


def turn_completed(runner: str, run_id: str, session: SessionRef) -> TurnCompleted:
    result = CommandResult(
        command="turn", status="completed", issued_at=now_rfc3339(), key_id="k1", signature=""
    )
    result.signature = sign(KEYS["k1"], runner, run_id, 1, result)
    return TurnCompleted(
        type="turn_completed",
        event_id=f"ev-{uuid.uuid4().hex}",
        runner_id=runner,
        run_id=run_id,
        attempt=1,
        session=session,
        native_session_id="ns-saved-1",
        occurred_at=now_rfc3339(),
        result=result,
    )


async def test_copies_of_a_turn_completed_publish_its_outcome_once(nc: Client) -> None:
    bus = Bus(nc.jetstream())
    runner, session = new_runner_id(), new_session()
    failed = resume_failed(runner, session=session)
    heard = Heard(nc)
    await heard.listen(subjects.outcomes(runner))
    await bus.settled(await bus.publish(failed, msg_id=failed.event_id))
    turns = [turn_completed(runner, failed.run_id, session) for _ in range(COPIES)]
    seq = 0
    for t in turns:
        seq = await bus.publish(msgspec.json.encode(t), subject=subjects.event(runner, "turn_completed"))
    await bus.settled(seq)
    assert list((await heard.settled()).values()) == [1]


# ---- a first handling that died between its step and its publication ----------------------


def crashed_step(
    runner: str, session: SessionRef, run_id: str, recorded_at: float
) -> tuple[Decision, RunStep]:
    """The step an `operator` decision records, its outbox entry recorded at `recorded_at`: what
    a handling that died right after `record_step.lua` leaves behind."""
    decision = Decision(
        decision_id=f"{run_id}:1:operator",
        runner_id=runner,
        run_id=run_id,
        attempt=1,
        session=session,
        action="operator",
        reason="native_provider_state_incompatible",
        failure_class="provider_attach_refused",
        decided_at=now_rfc3339(),
    )
    payload = msgspec.json.encode(decision)
    entry = OutboxEntry(
        subject=subjects.decisions(runner),
        msg_id=decision.decision_id,
        payload=payload,
        recorded_at=recorded_at,
    )
    step = RunStep(
        slot="1",
        slot_value=payload,
        run_fields=run_fields(run_id, runner, session, 1, "operator", decision),
        outbox=[entry],
        audit=decision_audit(decision, "classifier"),
    )
    return decision, step


Servers = tuple[NatsServer, RedisServer]


@pytest.fixture
async def without_sweeper(fresh_servers: Servers) -> AsyncIterator[tuple[Client, Redis]]:
    """The classifier's handler on its durable consumer, and no outbox sweeper: whatever is
    published of a recorded step, the report sent again published it."""
    n, rs = fresh_servers
    config = make_config(n.url, rs.url, runner_keys=KEYS)
    client = await nats.connect(n.url)
    js = client.jetstream()
    await ensure_streams(js)
    store = Redis(rs.url)
    handler = EventHandler(store, Outbox(store, js, grace_s=GRACE_S), config, js=js)
    consumer = PullConsumer.from_config(
        js,
        config,
        stream=subjects.EVENTS_STREAM,
        durable=subjects.CLASSIFIER_CONSUMER,
        filter_subject=subjects.EVENTS_ALL,
        handler=handler,
        service="classifier",
        fair_key=lambda msg: subjects.runner_of_event_subject(msg.subject) or "",
    )
    await consumer.start()
    await wait_for(consumer.ready, what="the consumer bound")
    try:
        yield client, store
    finally:
        await consumer.drain(5)
        await store.aclose()
        await client.close()


async def test_a_report_sent_again_publishes_what_a_crashed_handling_left_once(
    without_sweeper: tuple[Client, Redis],
) -> None:
    nc, store = without_sweeper
    bus = Bus(nc.jetstream())
    runner, session = new_runner_id(), new_session()
    event = resume_failed(runner, session=session, classification="provider_attach_refused")
    # The first handling recorded its step longer than the grace period ago and died.
    decision, step = crashed_step(runner, session, event.run_id, time.time() - 2 * GRACE_S)
    assert await RunStore(store).record_step(session.key, event.run_id, step) is None
    heard = Heard(nc)
    await heard.listen(subjects.decisions(runner))

    await bus.settled(await publish_all(bus, copies(event)))
    assert await heard.settled() == {decision.decision_id: 1}
    assert await store.execute("HLEN", keys.outbox(session.key)) == 0
    assert await bus.decisions(runner) == [msgspec.to_builtins(decision)]


async def test_a_report_sent_while_its_first_handling_still_publishes_leaves_it_to_that_handling(
    without_sweeper: tuple[Client, Redis],
) -> None:
    nc, store = without_sweeper
    bus = Bus(nc.jetstream())
    runner, session = new_runner_id(), new_session()
    event = resume_failed(runner, session=session, classification="provider_attach_refused")
    decision, step = crashed_step(runner, session, event.run_id, time.time())
    assert await RunStore(store).record_step(session.key, event.run_id, step) is None
    heard = Heard(nc)
    await heard.listen(subjects.decisions(runner))

    await bus.settled(await publish_all(bus, copies(event)))
    assert await heard.settled() == {}
    assert await store.execute("HLEN", keys.outbox(session.key)) == 1
    # The first handling goes on with its publication, as `_publish` does after its step.
    await Outbox(store, nc.jetstream(), grace_s=GRACE_S).flush(session.key, step.outbox)
    assert await heard.settled() == {decision.decision_id: 1}


async def test_a_sweeper_and_reports_sent_again_take_a_left_entry_once(
    without_sweeper: tuple[Client, Redis],
) -> None:
    nc, store = without_sweeper
    js = nc.jetstream()
    runner, session = new_runner_id(), new_session()
    run_id = f"run-{uuid.uuid4().hex}"
    decision, step = crashed_step(runner, session, run_id, time.time() - 2 * GRACE_S)
    assert await RunStore(store).record_step(session.key, run_id, step) is None
    heard = Heard(nc)
    await heard.listen(subjects.decisions(runner))

    # Five replicas' sweepers and five copies of the report, at once.
    outboxes = [Outbox(store, js, grace_s=GRACE_S) for _ in range(10)]
    published = await asyncio.gather(
        *(o.sweep() for o in outboxes[:5]),
        *(o.flush_leftovers(session.key, [decision.decision_id]) for o in outboxes[5:]),
    )
    assert sum(published) == 1
    assert await heard.settled() == {decision.decision_id: 1}
    assert await store.execute("HLEN", keys.outbox(session.key)) == 0


# ---- the runner SDKs hand a decision they acknowledged over once ---------------------------


def a_decision(runner: str) -> Decision:
    run_id = f"run-{uuid.uuid4().hex}"
    return Decision(
        decision_id=f"{run_id}:1:retry_same_session",
        runner_id=runner,
        run_id=run_id,
        attempt=1,
        session=new_session(),
        action="retry_same_session",
        reason="native_session_interrupted",
        failure_class="unclassified",
        decided_at=now_rfc3339(),
    )


async def test_the_python_sdk_hands_an_acknowledged_decision_over_once(own_nats: NatsServer) -> None:
    nc = await nats.connect(own_nats.url)
    js = nc.jetstream()
    await ensure_streams(js)
    runner_id = new_runner_id()
    runner = await connect(RunnerOptions(runner_id=runner_id, servers=own_nats.url, redelivery_delay=0.1))
    seen: list[str] = []
    a, b, c = (a_decision(runner_id) for _ in range(3))

    async def handle(decision: Decision) -> None:
        seen.append(decision.decision_id)
        if decision.decision_id == c.decision_id and seen.count(c.decision_id) == 1:
            raise RuntimeError("not acted on yet")  # given back: delivered again, as before

    async def publish(decision: Decision, msg_id: str) -> None:
        await js.publish(
            subjects.decisions(runner_id), msgspec.json.encode(decision), headers={"Nats-Msg-Id": msg_id}
        )

    async def consumer_holds_nothing() -> bool:
        info = await js.consumer_info(subjects.DECISIONS_STREAM, runner_id)
        return (info.num_ack_pending or 0) == 0 and (info.num_pending or 0) == 0

    handling = asyncio.create_task(runner.handle_decisions(handle))
    try:
        await publish(a, a.decision_id)
        await wait_for(lambda: seen == [a.decision_id], what="the first decision handled")
        await wait_for(consumer_holds_nothing, what="the first decision acknowledged")
        # The same decision stored again under another message id (a publication after the
        # duplicate window), then the next decision, then one whose handler fails once.
        await publish(a, f"{a.decision_id}:again")
        await publish(b, b.decision_id)
        await publish(c, c.decision_id)
        await wait_for(lambda: len(seen) >= 4, what="the next decisions handled")
        await wait_for(consumer_holds_nothing, what="every message acknowledged, the copy too")
        assert seen == [a.decision_id, b.decision_id, c.decision_id, c.decision_id]
    finally:
        await runner.close()
        await asyncio.wait_for(handling, 10)
        await nc.close()
