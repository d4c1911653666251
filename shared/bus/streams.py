"""The four streams of the contract, created or updated idempotently at start."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from shared import subjects


def _stream(
    name: str,
    subjects_: list[str],
    retention: RetentionPolicy,
    max_age_s: float | None,
    replicas: int,
    duplicate_window_s: float,
) -> StreamConfig:
    return StreamConfig(
        name=name,
        subjects=subjects_,
        retention=retention,
        max_age=max_age_s,
        storage=StorageType.FILE,
        num_replicas=replicas,
        duplicate_window=duplicate_window_s,
        discard=DiscardPolicy.OLD,
    )


def stream_configs(replicas: int, duplicate_window_s: float) -> list[StreamConfig]:
    day = 86400.0
    return [
        _stream(
            subjects.EVENTS_STREAM,
            [subjects.EVENTS_ALL],
            RetentionPolicy.LIMITS,
            7 * day,
            replicas,
            duplicate_window_s,
        ),
        _stream(
            subjects.DECISIONS_STREAM,
            [subjects.DECISIONS_ALL],
            RetentionPolicy.LIMITS,
            7 * day,
            replicas,
            duplicate_window_s,
        ),
        # A work queue: an item leaves the stream when its worker acknowledges it.
        _stream(
            subjects.WORK_STREAM,
            [subjects.WORK_ARCHIVE, subjects.WORK_RECONCILE],
            RetentionPolicy.WORK_QUEUE,
            None,
            replicas,
            duplicate_window_s,
        ),
        _stream(
            subjects.DEAD_STREAM,
            [subjects.DEAD_ALL],
            RetentionPolicy.LIMITS,
            30 * day,
            replicas,
            duplicate_window_s,
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
