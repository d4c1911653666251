"""A service described as data, and the `App` that runs one.

A service package's `service.py` exports `build(ctx) -> ServiceSpec` (its handlers need the
connections of the running process); `ServiceApp` turns the spec into what runs: the micro
service with its endpoints (shared/platform/bus/endpoints.py: decoding, concurrency, error replies),
the durable consumers (shared/platform/bus/consumer.py: decoding, dead letters, redelivery) with the
outbox sweeper beside them (shared/platform/worker.py), and the service's background tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from nats.aio.msg import Msg

from shared.platform.bus.consumer import Handler, PullConsumer, decoding
from shared.platform.bus.endpoints import Endpoints
from shared.platform.runtime import Context
from shared.platform.worker import Worker
from shared.records.outbox import Outbox

M = TypeVar("M")
Req = TypeVar("Req")
Rep = TypeVar("Rep")


@dataclass(frozen=True)
class ConsumerSpec(Generic[M]):
    """A durable pull consumer. The handler gets each message decoded into `message_type` (one
    that cannot be decoded is dead-lettered first); with `message_type=Msg` it gets the raw
    delivery and validates it itself (the classifier checks the subject before the body)."""

    stream: str
    durable: str
    filter_subject: str | None
    message_type: type[M]
    handler: Callable[[M], Awaitable[None]]
    fair_by: Callable[[Msg], str] | None = None
    """A key of each delivery (the classifier's: the runner of the subject): messages are then
    started by key in turn, each key with a bounded share (shared/platform/bus/fair.py)."""

    def delivery_handler(self) -> Handler:
        if self.message_type is Msg:
            return self.handler  # type: ignore[return-value]  # M is Msg here
        return decoding(self.message_type, self.handler)


@dataclass(frozen=True)
class EndpointSpec(Generic[Req, Rep]):
    """A request endpoint: `handler` answers a decoded `request_type` with a `reply_type`, or
    raises a `ServiceError` of the catalogue (shared/contract/errors.py)."""

    name: str
    subject: str
    request_type: type[Req]
    reply_type: type[Rep]
    handler: Callable[..., Awaitable[Rep]]
    """`handler(request)`, or `handler(request, runner_id)` with `runner_token`."""
    pipelined: bool = False
    """The handler sends its Redis commands when it is called, then returns an awaitable of the
    reply: requests that arrive together are answered by one task, in order, their commands in
    one write (shared/platform/bus/endpoints.py). An `async def` handler is not: it sends nothing until
    it is awaited."""
    runner_token: int | None = None
    """The position of `*` in `subject` that the server fills with the requesting runner's id
    (contract section 10): the handler gets it as its second argument."""


Background = Callable[[asyncio.Event], Coroutine[Any, Any, None]]
"""A task that runs beside the handlers until the event is set (at the drain)."""


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    """The process's name (`continuity serve <name>`); the micro service is `continuity-<name>`."""
    version: str
    description: str
    consumers: tuple[ConsumerSpec[Any], ...] = ()
    endpoints: tuple[EndpointSpec[Any, Any], ...] = ()
    outbox: Outbox | None = None
    """Where the handlers record decisions: its sweeper runs beside the consumers."""
    sweep_interval_s: float = 2.0
    background: tuple[Background, ...] = ()
    closers: tuple[Callable[[], Awaitable[None]], ...] = ()
    """Run last in the drain: connections of the service's own (a `PipelinedRedis`)."""

    @property
    def micro_name(self) -> str:
        return f"continuity-{self.name}"


Factory = Callable[[Context], ServiceSpec]


class ServiceApp:
    """The `App` (shared/platform/runtime.py) of a spec: endpoints first, then consumers and sweeper,
    then background tasks. The drain goes the same way, so the sweeper stops after every
    handler finished and publishes what they recorded last; the closers run at the end."""

    def __init__(self, name: str, build: Factory) -> None:
        self.name = name
        self._build = build
        self._endpoints: Endpoints | None = None
        self._worker: Worker | None = None
        self._spec: ServiceSpec | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, ctx: Context) -> None:
        spec = self._spec = self._build(ctx)
        if spec.name != self.name:
            raise ValueError(f"service {self.name!r} built the spec of {spec.name!r}")
        # Every service registers with the micro protocol (contract section 1), those without
        # endpoints too: operators find each running replica with $SRV.PING.
        ep = Endpoints(
            ctx.nc,
            spec.micro_name,
            spec.version,
            spec.description,
            ctx.config.request_concurrency,
            reply_prefixes=ctx.config.reply_prefixes,
        )
        for e in spec.endpoints:
            ep.add(
                e.name,
                e.subject,
                e.request_type,
                e.handler,
                pipelined=e.pipelined,
                runner_token=e.runner_token,
            )
        await ep.start()
        self._endpoints = ep
        consumers = [
            PullConsumer.from_config(
                ctx.js,
                ctx.config,
                stream=c.stream,
                durable=c.durable,
                filter_subject=c.filter_subject,
                handler=c.delivery_handler(),
                service=spec.name,
                fair_key=c.fair_by,
            )
            for c in spec.consumers
        ]
        self._worker = Worker(consumers, spec.outbox, spec.sweep_interval_s)
        await self._worker.start()
        self._tasks = [asyncio.create_task(task(self._stop)) for task in spec.background]

    async def drain(self, timeout: float) -> None:
        if self._endpoints is not None:
            await self._endpoints.drain(timeout)
        if self._worker is not None:
            await self._worker.drain(timeout)
        self._stop.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout)
        if self._spec is not None:
            for close in self._spec.closers:
                await close()

    def ready(self) -> bool:
        spec = self._spec
        if spec is None or self._worker is None:
            return False
        return self._endpoints is not None and self._worker.bound
