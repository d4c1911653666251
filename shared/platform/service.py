"""A service described as data, and the `Service` that runs it.

A service package's `service.py` exports `SPEC`, its `ServiceSpec`: its name and the endpoints
and durable consumers it owns, readable without connecting to anything (services/registry.py
gives them to `continuity streams` and to the CLI's messages). It also exports
`build(ctx, **options) -> Wiring`: a handler for each of those endpoints and consumers, which
need the process's connections, and the parts of its own (the outbox sweeper, background
loops, a connection to close at the end). The handlers are keyed by the specs themselves
(module constants that `SPEC` lists too), so a name is written once.

`Service` makes the parts (shared/platform/parts.py) of a spec: the micro service with its
endpoints (shared/platform/bus/endpoints.py: decoding, concurrency, error replies), a pull
consumer for each consumer (shared/platform/bus/consumer.py: decoding, dead letters,
redelivery), then the parts `build` returned. They start in that order and drain in the same
order, so that the outbox sweeper stops after every handler finished and publishes what they
recorded last. `shared.platform.runtime.serve` runs a `Service` in a process.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Generic, TypeAlias, TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from shared.contract.limits import MAX_REQUEST_BYTES
from shared.platform.bus.consumer import Handler, PullConsumer, decoding
from shared.platform.bus.endpoints import Endpoints
from shared.platform.bus.streams import DurableConsumer, durable_config
from shared.platform.config import Config
from shared.platform.logs import Log
from shared.platform.parts import Part
from shared.platform.redis import Redis

log = Log("continuity.service")

M = TypeVar("M")
P = TypeVar("P")
Req = TypeVar("Req")
Rep = TypeVar("Rep")


@dataclass(frozen=True)
class EndpointSpec(Generic[Req, Rep]):
    """A request endpoint: its handler answers a decoded `request_type` with a `reply_type`, or
    raises a `ServiceError` of the catalogue (shared/contract/errors.py)."""

    name: str
    subject: str
    request_type: type[Req]
    reply_type: type[Rep]
    pipelined: bool = False
    """The handler sends its Redis commands when it is called, then returns an awaitable of the
    reply: requests that arrive together are answered by one task, in order, their commands in
    one write (shared/platform/bus/endpoints.py). An `async def` handler is not: it sends nothing
    until it is awaited."""
    runner_token: int | None = None
    """The position of `*` in `subject` that the server fills with the requesting runner's id
    (contract section 10): the handler gets it as its second argument."""
    max_bytes: int = MAX_REQUEST_BYTES
    """The largest request body decoded; a larger one is answered `payload_too_large`."""


@dataclass(frozen=True)
class ConsumerSpec(Generic[M]):
    """A durable pull consumer. Its handler gets each message decoded into `message_type` (one
    that cannot be decoded is dead-lettered first); with `message_type=Msg` it gets the raw
    delivery and validates it itself (the classifier checks the subject before the body)."""

    stream: str
    durable: str
    filter_subject: str | None
    message_type: type[M]
    fair_by: Callable[[Msg], str] | None = None
    """A key of each delivery (the classifier's: the runner of the subject): messages are then
    started by key in turn, each key with a bounded share (shared/platform/bus/fair.py)."""

    def delivery_handler(self, handler: Callable[[M], Awaitable[None]]) -> Handler:
        if self.message_type is Msg:
            return handler  # type: ignore[return-value]  # M is Msg here
        return decoding(self.message_type, handler)

    def stored(self, replicas: int, ack_wait_s: float) -> DurableConsumer:
        """The consumer as JetStream stores it, for `continuity streams check|apply`."""
        config = durable_config(self.durable, self.filter_subject, ack_wait_s)
        return DurableConsumer(self.stream, config, replicas)


Handled: TypeAlias = EndpointSpec[Any, Any] | ConsumerSpec[Any]
"""A spec that needs a handler."""


def handled_name(spec: object) -> str:
    """An endpoint's name, a consumer's durable: how an error names it."""
    if isinstance(spec, EndpointSpec):
        return spec.name
    if isinstance(spec, ConsumerSpec):
        return spec.durable
    return repr(spec)


@dataclass(frozen=True)
class ServiceSpec:
    """What a service is and owns: written once, read by the framework, the CLI and the tests."""

    name: str
    """The process's name (`continuity serve <name>`); the micro service is `continuity-<name>`."""
    version: str
    description: str
    endpoints: tuple[EndpointSpec[Any, Any], ...] = ()
    consumers: tuple[ConsumerSpec[Any], ...] = ()
    registers: bool = True
    """Announced with the micro protocol, endpoints or not (contract section 1: operators find
    each running replica with $SRV.PING). The console, a web server for people, is not."""
    stores: bool = True
    """Keeps records in Redis: the process connects to REDIS_URL and is ready only while Redis
    answers. The console, which reaches the records through the services only, does not."""
    waits_for_redis: bool = False
    """Waits for Redis replicas or append-only files after its writes (CONTINUITY_REDIS_WAIT_*):
    at start, the server is checked for what they ask (the session-store)."""
    streams: tuple[Callable[[Config], StreamConfig], ...] = ()
    """Streams this service alone writes, besides the contract's four: created at its start
    when missing, never changed after (as the four), and checked by `continuity streams`."""

    def __post_init__(self) -> None:
        names = [e.name for e in self.endpoints] + [c.durable for c in self.consumers]
        if len(set(names)) != len(names):
            raise ValueError(f"service {self.name!r} names an endpoint or consumer twice: {names}")

    @property
    def micro_name(self) -> str:
        return f"continuity-{self.name}"

    @property
    def handled(self) -> tuple[Handled, ...]:
        """What a `Wiring` gives handlers for: each endpoint and each consumer."""
        return (*self.endpoints, *self.consumers)

    def answers(self, subject: str) -> bool:
        """Whether one of its endpoints takes requests on `subject`."""
        return any(subject_matches(e.subject, subject) for e in self.endpoints)


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` is any one token, `>` any tokens to the end."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(have) == len(want)


@dataclass
class Context:
    """The connections a service is started with (`shared.platform.runtime.serve` makes them)."""

    config: Config
    nc: Client
    js: JetStreamContext
    store: Redis | None
    """The Redis client; None for a service whose spec says it keeps nothing there."""

    @property
    def redis(self) -> Redis:
        if self.store is None:
            raise RuntimeError("this service has no Redis connection (ServiceSpec.stores is False)")
        return self.store


@dataclass(frozen=True)
class Wiring:
    """What a service's `build(ctx)` returns for its spec."""

    handlers: Mapping[Handled, Callable[..., Awaitable[Any]]]
    """By endpoint and consumer spec (`ServiceSpec.handled`), exactly those. An endpoint's is
    `handler(request)`, or `handler(request, runner_id)` with `runner_token`."""
    parts: tuple[Part, ...] = ()
    """Started after the endpoints and consumers, drained after them, in this order."""


Build = Callable[[Context], Wiring]


def check_handlers(spec: ServiceSpec, wiring: Wiring) -> None:
    """Raises `ValueError` naming each endpoint or consumer of `spec` without a handler, and
    each handler for one that `spec` does not list: a service must not start half wired."""
    declared = spec.handled
    missing = [handled_name(h) for h in declared if h not in wiring.handlers]
    unknown = [handled_name(h) for h in wiring.handlers if h not in declared]
    problems = []
    if missing:
        problems.append(f"no handler for {', '.join(missing)}")
    if unknown:
        problems.append(f"a handler for {', '.join(unknown)}, which its SPEC does not list")
    if problems:
        raise ValueError(f"service {spec.name!r}: " + "; ".join(problems))


class Service:
    """A running service: the parts of its spec and of its `build`, started and drained in order;
    ready when every part is."""

    def __init__(self, spec: ServiceSpec, build: Build) -> None:
        self.spec = spec
        self._build = build
        self._added: list[Part] = []
        self.parts: list[Part] = []
        self.ctx: Context | None = None
        """The connections it was started with."""
        self._started = False

    @classmethod
    def of(cls, module: ModuleType, **options: Any) -> Service:
        """The service a package's `service.py` describes: its `SPEC`, and its `build` given
        `options`, completed by its `prepare(**options)` when it has one (settings of its own,
        read before the process connects)."""
        prepare = getattr(module, "prepare", None)
        if prepare is not None:
            options = prepare(**options)
        return cls(module.SPEC, functools.partial(module.build, **options))

    @property
    def name(self) -> str:
        return self.spec.name

    def add(self, part: Part) -> None:
        """A part of the process's own beside the spec's: started and drained after them."""
        self._added.append(part)

    def part(self, kind: type[P]) -> P:
        """The started part of class `kind` (the console's web server, to learn its port)."""
        for part in self.parts:
            if isinstance(part, kind):
                return part
        raise LookupError(f"service {self.name!r} has no {kind.__name__} part")

    async def start(self, ctx: Context) -> None:
        self.ctx = ctx
        spec = self.spec
        wiring = self._build(ctx)
        check_handlers(spec, wiring)
        parts: list[Part] = []
        if spec.registers:
            endpoints = Endpoints(
                ctx.nc,
                spec.micro_name,
                spec.version,
                spec.description,
                ctx.config.request_concurrency,
                reply_prefixes=ctx.config.reply_prefixes,
            )
            for e in spec.endpoints:
                endpoints.add(
                    e.name,
                    e.subject,
                    e.request_type,
                    wiring.handlers[e],
                    pipelined=e.pipelined,
                    runner_token=e.runner_token,
                    max_bytes=e.max_bytes,
                )
            parts.append(endpoints)
        elif spec.endpoints:
            raise ValueError(f"service {spec.name!r} has endpoints but does not register them")
        parts += [
            PullConsumer.from_config(
                ctx.js,
                ctx.config,
                stream=c.stream,
                durable=c.durable,
                filter_subject=c.filter_subject,
                handler=c.delivery_handler(wiring.handlers[c]),
                service=spec.name,
                fair_key=c.fair_by,
            )
            for c in spec.consumers
        ]
        self.parts = [*parts, *wiring.parts, *self._added]
        for part in self.parts:
            await part.start()
        self._started = True

    async def drain(self, timeout: float) -> None:
        """Each part in order, all of them within `timeout` together (what an orchestrator's
        grace period allows for the whole process); a part that fails to drain, or uses up the
        time, does not keep the ones after it (a closer among them) from being told to stop."""
        deadline = time.monotonic() + timeout
        for part in self.parts:
            try:
                await part.drain(max(deadline - time.monotonic(), 0.0))
            except Exception as exc:
                log.warning("part_drain_failed", part=type(part).__name__, error_type=type(exc).__name__)

    def ready(self) -> bool:
        return self._started and all(part.ready() for part in self.parts)
