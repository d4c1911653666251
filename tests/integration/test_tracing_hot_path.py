"""An outbox flush with tracing on (shared/records/outbox.py): in a sampled trace it publishes
in a producer span of its own, whose context the message carries; in a trace sampled out, the
message carries the current span's context, unsampled, and no span is made for it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import nats
import pytest
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from continuity.devstack.servers import NatsServer
from shared.platform import tracing
from shared.platform.redis import Redis
from shared.records.outbox import Outbox, OutboxEntry

pytestmark = pytest.mark.asyncio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
"""What a runner's SDK sends: a sampled trace."""


@pytest.fixture
async def js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="HOT_TRACES", subjects=["hot.traces.>"]))
    yield js
    await js.delete_stream("HOT_TRACES")
    await nc.close()


async def flushed_header(js: JetStreamContext, redis: Redis, sampler: str) -> tuple[str, str]:
    """The traceparent the flushed message carries, and the current span's."""
    tracing.setup(
        "hot",
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_TRACES_SAMPLER": sampler},
    )
    try:
        subject = f"hot.traces.{uuid.uuid4().hex[:8]}"
        entry = OutboxEntry(subject=subject, msg_id=uuid.uuid4().hex, payload=b"{}", trace=SENT)
        with tracing.span("handled", parent=SENT, kind="consumer") as begun:
            assert begun is not None
            await Outbox(redis, js, service="hot").flush("hot-session", [entry])
            current = begun.traceparent()
    finally:
        tracing.shutdown(0.1)
    msg = await js.get_last_msg("HOT_TRACES", subject)
    return (msg.headers or {})[tracing.HEADER], current


async def test_a_sampled_flush_publishes_in_a_span_of_its_own(
    js: JetStreamContext, records_redis: Redis
) -> None:
    header, current = await flushed_header(js, records_redis, "always_on")
    assert header.startswith(f"00-{TRACE_ID}-") and header.endswith("-01")
    assert header != current  # the producer span's, a child of the current one


async def test_a_flush_sampled_out_passes_the_current_context_on(
    js: JetStreamContext, records_redis: Redis
) -> None:
    header, current = await flushed_header(js, records_redis, "always_off")
    assert header == current
    assert header.startswith(f"00-{TRACE_ID}-") and header.endswith("-00")
