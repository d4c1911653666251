"""The four streams of the contract, created or updated idempotently at start."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from shared import subjects


def stream_configs(replicas: int, duplicate_window_s: float) -> list[StreamConfig]:
    common = {
        "storage": StorageType.FILE,
        "num_replicas": replicas,
        "duplicate_window": duplicate_window_s,
        "discard": DiscardPolicy.OLD,
    }
    return [
        StreamConfig(
            name=subjects.EVENTS_STREAM,
            subjects=[subjects.EVENTS_ALL],
            retention=RetentionPolicy.LIMITS,
            max_age=7 * 86400,
            **common,
        ),
        StreamConfig(
            name=subjects.DECISIONS_STREAM,
            subjects=[subjects.DECISIONS_ALL],
            retention=RetentionPolicy.LIMITS,
            max_age=7 * 86400,
            **common,
        ),
        StreamConfig(
            name=subjects.WORK_STREAM,
            subjects=[subjects.WORK_ARCHIVE, subjects.WORK_RECONCILE],
            retention=RetentionPolicy.WORK_QUEUE,
            **common,
        ),
        StreamConfig(
            name=subjects.DEAD_STREAM,
            subjects=[subjects.DEAD_ALL],
            retention=RetentionPolicy.LIMITS,
            max_age=30 * 86400,
            **common,
        ),
    ]


async def ensure_streams(js: JetStreamContext, replicas: int = 1, duplicate_window_s: float = 120) -> None:
    for config in stream_configs(replicas, duplicate_window_s):
        assert config.name is not None
        try:
            await js.stream_info(config.name)
        except NotFoundError:
            await js.add_stream(config)
        else:
            await js.update_stream(config)
