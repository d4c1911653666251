"""The four streams of the contract and durable consumers: created when missing, never changed
once they exist.

A service started with another configuration than the cluster's (a replica without
`CONTINUITY_STREAM_REPLICAS`, say) must not turn R3 streams into R1: at start it only creates
what is missing, and reports every difference between the stored and the configured settings
(a log line and `continuity_stream_drift` / `continuity_consumer_drift`). Updating an existing
stream or consumer is left to an operator's explicit `continuity streams apply`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)
from nats.js.errors import BadRequestError, NotFoundError

from shared.contract import subjects
from shared.platform import metrics
from shared.platform.config import Config
from shared.platform.environment import MAX_IN_FLIGHT
from shared.platform.logs import Log

log = Log("continuity.streams")

DAY_S = 86400.0
MAX_ACK_PENDING = MAX_IN_FLIGHT


@dataclass(frozen=True)
class StreamLimits:
    """What each stream may hold (docs/configuration.md). JetStream reserves each stream's
    `max_bytes` in the server's store (`max_file_store`), so together they must fit it."""

    events_max_bytes: int = Config.events_max_bytes
    decisions_max_bytes: int = Config.decisions_max_bytes
    work_max_bytes: int = Config.work_max_bytes
    dead_max_bytes: int = Config.dead_max_bytes
    per_runner_messages: int = Config.stream_messages_per_runner
    """`max_msgs_per_subject` of CONTINUITY_EVENTS and CONTINUITY_DECISIONS, whose subjects carry
    one runner_id each (a runner's account may publish its events on one subject,
    `continuity.events.<runner_id>.resume_failed`): past it, that runner's oldest messages go,
    never another runner's. A runner that floods keeps at most this many events, each at most
    its account's `max_payload` (runners.conf)."""

    @classmethod
    def of(cls, config: Config) -> StreamLimits:
        return cls(
            config.events_max_bytes,
            config.decisions_max_bytes,
            config.work_max_bytes,
            config.dead_max_bytes,
            config.stream_messages_per_runner,
        )


def _stream(
    name: str,
    subjects_: list[str],
    retention: RetentionPolicy,
    max_age_s: float | None,
    replicas: int,
    duplicate_window_s: float,
    max_bytes: int,
    *,
    per_subject: int = -1,
    discard: DiscardPolicy = DiscardPolicy.OLD,
) -> StreamConfig:
    return StreamConfig(
        name=name,
        subjects=subjects_,
        retention=retention,
        max_age=max_age_s,
        max_bytes=max_bytes,
        max_msgs_per_subject=per_subject,  # -1: no limit
        storage=StorageType.FILE,
        num_replicas=replicas,
        duplicate_window=duplicate_window_s,
        discard=discard,
    )


def stream_configs(
    replicas: int, duplicate_window_s: float, limits: StreamLimits | None = None
) -> list[StreamConfig]:
    limits = limits or StreamLimits()
    return [
        # Full, the oldest events go; a runner's share is its own subject's limit.
        _stream(
            subjects.EVENTS_STREAM,
            [subjects.EVENTS_ALL],
            RetentionPolicy.LIMITS,
            7 * DAY_S,
            replicas,
            duplicate_window_s,
            limits.events_max_bytes,
            per_subject=limits.per_runner_messages,
        ),
        _stream(
            subjects.DECISIONS_STREAM,
            [subjects.DECISIONS_ALL],
            RetentionPolicy.LIMITS,
            7 * DAY_S,
            replicas,
            duplicate_window_s,
            limits.decisions_max_bytes,
            per_subject=limits.per_runner_messages,
        ),
        # A work queue: an item leaves the stream when its worker acknowledges it. Full, it
        # refuses new items (their publisher's outbox tries again) rather than drop waiting work.
        _stream(
            subjects.WORK_STREAM,
            [subjects.WORK_ARCHIVE, subjects.WORK_RECONCILE],
            RetentionPolicy.WORK_QUEUE,
            None,
            replicas,
            duplicate_window_s,
            limits.work_max_bytes,
            discard=DiscardPolicy.NEW,
        ),
        _stream(
            subjects.DEAD_STREAM,
            [subjects.DEAD_ALL],
            RetentionPolicy.LIMITS,
            30 * DAY_S,
            replicas,
            duplicate_window_s,
            limits.dead_max_bytes,
        ),
    ]


def durable_config(durable: str, filter_subject: str | None, ack_wait_s: float) -> ConsumerConfig:
    """A service's durable pull consumer. JetStream counts deliveries (the service caps them),
    and no replica count is given: a consumer created by a service has its stream's replicas,
    so it is never weaker than the stream."""
    return ConsumerConfig(
        durable_name=durable,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ack_wait_s,
        max_deliver=-1,
        max_ack_pending=MAX_ACK_PENDING,
        filter_subject=filter_subject,
    )


@dataclass(frozen=True)
class DurableConsumer:
    """A durable consumer as JetStream stores it: its stream, its settings, and the replica count
    it should have. Which service owns which is said by the services' specs (services/registry.py
    lists them all)."""

    stream: str
    config: ConsumerConfig
    replicas: int

    @property
    def durable(self) -> str:
        assert self.config.durable_name is not None
        return self.config.durable_name


# ---- differences between what is stored and what is configured ------------------------------


@dataclass(frozen=True)
class Drift:
    """One setting whose stored value differs from the configured one. Values are settings
    (counts, durations, policies, subjects), never anything a runner sent."""

    kind: Literal["stream", "consumer"]
    stream: str
    consumer: str | None
    field: str
    stored: str
    configured: str

    @property
    def name(self) -> str:
        return self.stream if self.consumer is None else f"{self.stream}/{self.consumer}"


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if hasattr(value, "value"):  # an enum
        return str(value.value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _same(stored: Any, configured: Any) -> bool:
    if isinstance(stored, float) or isinstance(configured, float):
        # Durations travel as nanoseconds: compare them to the microsecond.
        return math.isclose(float(stored), float(configured), abs_tol=1e-6)
    if isinstance(stored, list) and isinstance(configured, list):
        return sorted(stored) == sorted(configured)
    return bool(stored == configured)


# What the server stores for a setting left out of a configuration.
_STREAM_FIELDS: dict[str, Callable[[StreamConfig], Any]] = {
    "subjects": lambda c: list(c.subjects or []),
    "retention": lambda c: c.retention or RetentionPolicy.LIMITS,
    "storage": lambda c: c.storage or StorageType.FILE,
    "num_replicas": lambda c: c.num_replicas or 1,
    "max_age": lambda c: float(c.max_age or 0),
    "max_msgs": lambda c: -1 if c.max_msgs is None else c.max_msgs,
    "max_bytes": lambda c: -1 if c.max_bytes is None else c.max_bytes,
    "max_msgs_per_subject": lambda c: -1 if c.max_msgs_per_subject in (None, 0) else c.max_msgs_per_subject,
    "max_msg_size": lambda c: -1 if c.max_msg_size is None else c.max_msg_size,
    "duplicate_window": lambda c: float(c.duplicate_window or 0),
    "discard": lambda c: c.discard or DiscardPolicy.OLD,
}

_CONSUMER_FIELDS: dict[str, Callable[[ConsumerConfig], Any]] = {
    "filter_subject": lambda c: c.filter_subject or "",
    "ack_policy": lambda c: c.ack_policy or AckPolicy.EXPLICIT,
    "ack_wait": lambda c: float(c.ack_wait or 30),
    "max_deliver": lambda c: -1 if c.max_deliver in (None, 0) else c.max_deliver,
    "max_ack_pending": lambda c: c.max_ack_pending or 1000,
}


def stream_drift(stored: StreamConfig, configured: StreamConfig) -> list[Drift]:
    name = configured.name or ""
    return [
        Drift("stream", name, None, field, _show(a), _show(b))
        for field, get in _STREAM_FIELDS.items()
        if not _same(a := get(stored), b := get(configured))
    ]


def consumer_replicas(info: ConsumerInfo) -> int:
    """The replicas a consumer has: its leader and its peers (1 on a single server)."""
    if info.cluster is None or info.cluster.leader is None:
        return info.config.num_replicas or 1
    return 1 + len(info.cluster.replicas or [])


def consumer_drift(info: ConsumerInfo, spec: DurableConsumer) -> list[Drift]:
    pairs = [(field, get(info.config), get(spec.config)) for field, get in _CONSUMER_FIELDS.items()]
    pairs.append(("num_replicas", consumer_replicas(info), spec.replicas))
    return [
        Drift("consumer", spec.stream, spec.durable, field, _show(a), _show(b))
        for field, a, b in pairs
        if not _same(a, b)
    ]


def _export(
    kind: Literal["stream", "consumer"], stream: str, consumer: str | None, drifts: list[Drift]
) -> None:
    """Set the drift gauges of one stream or consumer: 1 per differing field, 0 for the rest."""
    differing = {d.field for d in drifts}
    fields = _STREAM_FIELDS if kind == "stream" else [*_CONSUMER_FIELDS, "num_replicas"]
    for field in fields:
        value = 1 if field in differing else 0
        if kind == "stream":
            metrics.STREAM_DRIFT.labels(stream=stream, field=field).set(value)
        else:
            metrics.CONSUMER_DRIFT.labels(stream=stream, consumer=consumer, field=field).set(value)
    for d in drifts:
        # Names of the setting only: `continuity streams check` shows the values.
        log.warning(f"{kind}_drift", stream=stream, consumer=consumer, field=d.field)


# ---- what a service does at start -------------------------------------------------------------


async def _create_stream(js: JetStreamContext, config: StreamConfig) -> StreamConfig | None:
    """Create a missing stream; None when created, else the config another replica created first."""
    assert config.name is not None
    try:
        await js.add_stream(config)
        log.info("stream_created", stream=config.name, replicas=config.num_replicas)
        return None
    except BadRequestError:
        # Created meanwhile by another replica with other settings: that one stands.
        return (await js.stream_info(config.name)).config


async def ensure_streams(
    js: JetStreamContext,
    replicas: int = 1,
    duplicate_window_s: float = 120,
    limits: StreamLimits | None = None,
) -> list[Drift]:
    """Create the streams that are missing; leave existing ones exactly as they are and report
    (log and metric) how they differ from this configuration. Returns the differences."""
    found: list[Drift] = []
    for config in stream_configs(replicas, duplicate_window_s, limits):
        found += await ensure_stream(js, config)
    return found


async def ensure_stream(js: JetStreamContext, config: StreamConfig) -> list[Drift]:
    """`ensure_streams` for one stream."""
    assert config.name is not None
    try:
        stored: StreamConfig | None = (await js.stream_info(config.name)).config
    except NotFoundError:
        stored = await _create_stream(js, config)
    drifts = [] if stored is None else stream_drift(stored, config)
    _export("stream", config.name, None, drifts)
    return drifts


def history_stream_config(config: Config) -> StreamConfig:
    """CONTINUITY_HISTORY (contract 9.14): finished runs, one message per run's subject, kept
    for the retention, read by the last message of a subject. Only the reconciliation service,
    which writes it, creates it."""
    return _stream(
        subjects.HISTORY_STREAM,
        [subjects.HISTORY_ALL],
        RetentionPolicy.LIMITS,
        config.retention_days * DAY_S,
        config.stream_replicas,
        config.duplicate_window_s,
        config.history_max_bytes,
        per_subject=1,
    )


async def ensure_consumer(js: JetStreamContext, spec: DurableConsumer) -> list[Drift]:
    """Create a missing durable consumer; an existing one is left as it is, its differences
    from `spec` reported like a stream's."""
    try:
        info = await js.consumer_info(spec.stream, spec.durable)
    except NotFoundError:
        info = await js.add_consumer(spec.stream, spec.config)
        log.info("consumer_created", stream=spec.stream, consumer=spec.durable)
    drifts = consumer_drift(info, spec)
    _export("consumer", spec.stream, spec.durable, drifts)
    return drifts


# ---- what an operator does: `continuity streams check|apply` ------------------------------------


async def check(
    js: JetStreamContext, configs: list[StreamConfig], consumers: list[DurableConsumer]
) -> tuple[list[str], list[Drift]]:
    """What is missing (stream names, `stream/durable` for consumers), and what differs."""
    missing: list[str] = []
    drifts: list[Drift] = []
    for config in configs:
        assert config.name is not None
        try:
            info = await js.stream_info(config.name or "")
        except NotFoundError:
            missing.append(config.name)
            continue
        drifts += stream_drift(info.config, config)
    for spec in consumers:
        if spec.stream in missing:
            missing.append(f"{spec.stream}/{spec.durable}")
            continue
        try:
            cinfo = await js.consumer_info(spec.stream, spec.durable)
        except NotFoundError:
            missing.append(f"{spec.stream}/{spec.durable}")
            continue
        drifts += consumer_drift(cinfo, spec)
    return missing, drifts


async def apply(
    js: JetStreamContext, configs: list[StreamConfig], consumers: list[DurableConsumer]
) -> list[str]:
    """Create what is missing and update what differs; returns what was changed."""
    missing, drifts = await check(js, configs, consumers)
    changed: list[str] = []
    for config in configs:
        if config.name in missing:
            await js.add_stream(config)
            changed.append(f"created stream {config.name}")
        elif any(d.kind == "stream" and d.stream == config.name for d in drifts):
            await js.update_stream(config)
            changed.append(f"updated stream {config.name}")
            await _settled(js, config)
    for spec in consumers:
        # Here the replica count is explicit: the operator asked for this one.
        wanted = dataclasses.replace(spec.config, num_replicas=spec.replicas)
        if f"{spec.stream}/{spec.durable}" in missing:
            await js.add_consumer(spec.stream, wanted)
            changed.append(f"created consumer {spec.stream}/{spec.durable}")
        elif any(d.kind == "consumer" and d.name == f"{spec.stream}/{spec.durable}" for d in drifts):
            await js.add_consumer(spec.stream, wanted)  # an update of the existing durable
            changed.append(f"updated consumer {spec.stream}/{spec.durable}")
    return changed


async def _settled(js: JetStreamContext, config: StreamConfig, timeout_s: float = 30.0) -> None:
    """Wait until the stream's Raft group holds the new replica count and every peer is current.

    A cluster accepts a stream update before it has grown the group: the config reports three
    replicas while one peer holds the data. A consumer raised to three replicas in that moment is
    refused ("exceeds parent stream") or placed on the peers that exist and stays below three.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        info = await js.stream_info(config.name or "")
        if _group_holds(info, config.num_replicas or 1):
            return
        if loop.time() >= deadline:
            raise TimeoutError(f"stream {config.name} did not reach {config.num_replicas} current replicas")
        await asyncio.sleep(0.2)  # poll interval of a deadline-bounded wait


def _group_holds(info: StreamInfo, replicas: int) -> bool:
    """Whether a stream's group has its leader and `replicas - 1` current followers."""
    if info.config.num_replicas != replicas:
        return False
    if info.cluster is None:  # a single server: no group to grow
        return True
    peers = info.cluster.replicas or []
    return info.cluster.leader is not None and len(peers) == replicas - 1 and all(p.current for p in peers)
