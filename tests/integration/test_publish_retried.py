"""The simulated runner's publication of an event across a NATS restart: retried with the same
`Nats-Msg-Id` until JetStream confirms it, stored once, decided once."""

from __future__ import annotations

import asyncio
import contextlib
import random

import msgspec
import nats
import pytest
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from continuity.servers import NatsServer, RedisServer
from continuity.simulate.keys import DEMO_KEYS
from continuity.simulate.resend import PublishFailed, publish_retried
from continuity.simulate.scenarios import SCENARIOS
from continuity.simulate.wire import RunContext, build
from services.classifier.service import ClassifierApp
from shared import subjects
from shared.contracts import Decision, SessionRef
from tests.support import make_config, running, wait_for


async def test_a_publish_retried_across_a_nats_restart_keeps_its_id_and_is_decided_once(
    fresh_servers: tuple[NatsServer, RedisServer],
) -> None:
    n, r = fresh_servers
    async with running(ClassifierApp(), make_config(n.url, r.url, runner_keys=DEMO_KEYS)):
        nc = await nats.connect(n.url, reconnect_time_wait=0.2, max_reconnect_attempts=-1)
        js = nc.jetstream()
        decisions: list[Decision] = []

        async def on_decision(msg: Msg) -> None:
            decisions.append(msgspec.json.decode(msg.data, type=Decision))

        ctx = RunContext(
            "sim-restart",
            "run-restart-1",
            SessionRef(tenant="sim", conversation_id="restart", agent_id="codex"),
            "ns-restart-1",
            "same_session_only",
        )
        out = build(SCENARIOS["drop"], ctx, 1, DEMO_KEYS, random.Random(1))
        msg_id, payload = out.publications[0]
        subject = subjects.event(ctx.runner_id, "resume_failed")
        retries: list[str] = []

        n.stop()
        publishing = asyncio.create_task(
            publish_retried(
                js, subject, payload, msg_id,
                attempt_timeout_s=0.5, on_retry=lambda _, exc: retries.append(type(exc).__name__),
            )
        )  # fmt: skip
        await wait_for(lambda: len(retries) >= 2, timeout=10, what="two failed attempts while NATS is down")
        n.start()
        attempts = await publishing
        assert attempts >= 3

        await js.subscribe(
            subjects.decisions(ctx.runner_id),
            stream=subjects.DECISIONS_STREAM,
            cb=on_decision,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )

        async def settled() -> bool:
            info = await js.consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
            return bool(decisions) and info.num_pending == 0 and info.num_ack_pending == 0

        await wait_for(settled, timeout=20, what="the event decided")
        events = await js.stream_info(subjects.EVENTS_STREAM)
        assert events.state.messages == 1
        stored = await js.get_msg(subjects.EVENTS_STREAM, events.state.last_seq)
        assert (stored.headers or {}).get("Nats-Msg-Id") == msg_id and stored.data == payload
        assert [(d.run_id, d.attempt) for d in decisions] == [("run-restart-1", 1)]
        await nc.close()


async def test_a_publish_gives_up_after_its_bounded_attempts(
    fresh_servers: tuple[NatsServer, RedisServer],
) -> None:
    n, _ = fresh_servers
    nc = await nats.connect(n.url, reconnect_time_wait=0.2, max_reconnect_attempts=-1)
    n.stop()
    with pytest.raises(PublishFailed) as failed:
        await publish_retried(
            nc.jetstream(), "continuity.events.x.resume", b"{}", "id-1", attempts=3, attempt_timeout_s=0.2
        )
    assert failed.value.attempts == 3
    with contextlib.suppress(Exception):  # a connection still reconnecting may not close cleanly
        await nc.close()
