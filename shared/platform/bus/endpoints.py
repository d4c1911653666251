"""Request endpoints registered with the NATS micro protocol (`$SRV.PING`, `.INFO`, `.STATS`).

Each request is decoded into its contract Struct, handled in its own task (so one replica
serves many requests at once while each waits on Redis), and answered with the reply Struct or
with the contract's error reply: headers `Nats-Service-Error-Code` and `Nats-Service-Error`, body
`{"error": {"code", "message"}}`.

A request is answered only when its reply subject starts with one of the configured prefixes
(inboxes, `_INBOX.`, and `_R_.`, which the server puts in place of a runner's reply address on a
service import). Anything else, a JetStream API subject or another runner's subject, is a reply
address nobody should be able to make a service write to: the request is dropped unhandled,
counted as `continuity_requests_total{code="reply_refused"}` and logged without the subject.

A *pipelined* endpoint's handler sends its Redis commands when it is called and returns an
awaitable of the reply. Its requests that arrive together (one read of the connection) are then
answered by one task, in order, instead of one task each: their commands share one write, and
the task wakes once when their replies arrive. Other handlers (`async def`) get a task each.

Endpoints are registered through micro's groups (`continuity.sessions` + `decide`), and errors
are answered with micro's `respond_error` and counted in `$SRV.STATS` (`num_errors`,
`last_error`: the status and the closed code, never a message).
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Endpoint, Group, Service

from shared.contract import subjects
from shared.contract.decoding import InvalidInput, decode
from shared.contract.errors import (
    CATALOGUE,
    INTERNAL_ERROR,
    UNAVAILABLE,
    ErrorBody,
    ErrorDetail,
    ServiceError,
)
from shared.contract.limits import MAX_REQUEST_BYTES
from shared.contract.types import RUNNER_ID_PATTERN
from shared.platform import metrics, tracing
from shared.platform.bus import nats_private
from shared.platform.config import Config
from shared.platform.logs import Log
from shared.platform.redis.store import TRANSIENT_REDIS_ERRORS

Req = TypeVar("Req")
REPLY_REFUSED = "reply_refused"
ANSWER_CHUNK = 32
"""Replies of a pipelined batch written out together: after so many, the batch lets the loop
send them before it answers the rest, so that the requesters (and NATS) work on them meanwhile
instead of waiting for the whole batch."""
log = Log("continuity.endpoints")
_encode = msgspec.json.Encoder().encode


def error_body(error: ServiceError) -> bytes:
    """The body of an error reply; micro's `respond_error` sets the two headers."""
    return _encode(ErrorBody(ErrorDetail(error.code, error.message)))


class _Route:
    """One endpoint: its micro registration, and how a request to it is dispatched."""

    def __init__(self, name: str, subject: str, dispatch: Callable[[Request], Awaitable[None]]) -> None:
        self.name = name
        self.subject = subject
        self.dispatch = dispatch
        self.micro: Endpoint | None = None
        self._counters: dict[str, Callable[[], None]] = {}
        self._durations: Callable[..., None] | None = None

    def record(self, code: str, seconds: float, trace_id: str | None = None) -> None:
        """Count one answered request and its duration (the metric writers, bound once)."""
        count = self._counters.get(code)
        if count is None:
            count = self._counters[code] = metrics.adder(metrics.REQUESTS, self.name, code)
        count()
        if self._durations is None:
            self._durations = metrics.observer(metrics.REQUEST_DURATION, self.name)
        self._durations(seconds, trace_id)

    def count_error(self, error: ServiceError) -> None:
        # micro counts an error only when the handler it called raises, and then answers it
        # itself without a body. Requests are answered in their own tasks, after that handler
        # returned, with the contract's body: the count is kept on micro's endpoint directly.
        if self.micro is not None:
            nats_private.count_error(self.micro, f"{error.status}:{error.code}")


class Endpoints:
    """One micro service with typed endpoints, concurrent handling and a graceful drain."""

    def __init__(
        self,
        nc: Client,
        name: str,
        version: str,
        description: str,
        concurrency: int = 256,
        *,
        reply_prefixes: tuple[str, ...] = Config.reply_prefixes,
    ) -> None:
        self._nc = nc
        self._reply_prefixes = reply_prefixes
        self._name = name
        self._version = version
        self._description = description
        self._routes: list[_Route] = []
        self._service: Service | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(concurrency)
        self._batch: list[tuple[_Route, Request, float, Awaitable[Any], tracing.Span | None]] = []
        self._batch_open = False

    def add(
        self,
        name: str,
        subject: str,
        request_type: type[Req],
        handler: Callable[[Req], Awaitable[Any]],
        *,
        pipelined: bool = False,
        runner_token: int | None = None,
        max_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        """With `runner_token`, `subject` has a `*` at that position: the runner_id the server
        put there (contract section 10) is passed to the handler after the request."""
        decoder = msgspec.json.Decoder(request_type)

        async def dispatch(request: Request) -> None:
            if not self._reply_allowed(name, request):
                return
            # Waiting here, not queueing unboundedly, is the back-pressure of a busy replica.
            await self._slots.acquire()
            started = time.perf_counter()
            if runner_token is None:
                pending = _start(request.data, decoder, handler, max_bytes)
            else:
                runner = request.subject.split(".")[runner_token]
                if _RUNNER_ID.match(runner) is None:
                    # The wildcard takes any token (up to the server's control line): only a
                    # runner_id of the contract's pattern reaches a handler, a key or a record.
                    pending = _raise(InvalidInput("invalid_field", "the subject's runner_id is not valid"))
                else:
                    handle = functools.partial(_with_runner, handler, runner)
                    pending = _start(request.data, decoder, handle, max_bytes)
            span = None
            if tracing.ENABLED:  # the request's own span, child of the requester's traceparent
                span = tracing.start(
                    f"{self._name} {name}",
                    parent=tracing.parent_of(request.headers),
                    kind="server",
                    endpoint=name,
                )
                pending = tracing.within(span, pending)
            if pipelined:
                self._batch.append((route, request, started, pending, span))
                if not self._batch_open:
                    self._batch_open = True
                    self._spawn(self._answer_batch())
            else:
                self._spawn(self._answer(route, request, started, pending, span))

        route = _Route(name, subject, dispatch)
        self._routes.append(route)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _answer_batch(self) -> None:
        # Started in the loop iteration after the first request of the batch: every request
        # read meanwhile is in it. Later ones open the next batch, answered concurrently.
        batch, self._batch, self._batch_open = self._batch, [], False
        for i, (route, request, started, pending, span) in enumerate(batch, 1):
            await self._answer(route, request, started, pending, span)
            if i % ANSWER_CHUNK == 0 and i < len(batch):
                await asyncio.sleep(0)  # the connection's flusher writes the replies so far

    def _reply_allowed(self, name: str, request: Request) -> bool:
        reply = nats_private.reply_subject(request)
        if reply and reply.startswith(self._reply_prefixes):
            return True
        metrics.labelled(metrics.REQUESTS, name, REPLY_REFUSED).inc()
        log.warning("request_reply_refused", endpoint=name, has_reply=bool(reply))
        return False

    async def start(self) -> None:
        self._service = await add_service(
            self._nc,
            name=self._name,
            version=self._version,
            description=self._description,
            queue_group=subjects.QUEUE_GROUP,
        )
        groups: dict[str, Group] = {}
        for route in self._routes:
            prefix, _, last = route.subject.rpartition(".")
            group = groups.get(prefix)
            if group is None:
                group = groups[prefix] = self._service.add_group(name=prefix)
            await group.add_endpoint(name=route.name, subject=last, handler=route.dispatch)
            route.micro = nats_private.newest_endpoint(self._service)
        # add_endpoint does not flush: started means the server holds every endpoint's interest.
        await self._nc.flush()

    def ready(self) -> bool:
        """Registered: the server holds the interest of every endpoint."""
        return self._service is not None

    async def drain(self, timeout: float) -> None:
        """Stop taking requests, answer those already received, and wait (up to `timeout`) for
        those in flight. The control subjects ($SRV.*) go with the connection's own drain."""
        # nats.micro has no drain: it stops endpoints by unsubscribing, which drops requests
        # already delivered to this process; draining each endpoint's subscription answers them.
        found = [nats_private.endpoint_subscription(route.micro) for route in self._routes if route.micro]
        subscriptions: list[Any] = [sub for sub in found if sub is not None]
        await asyncio.gather(*(sub.drain() for sub in subscriptions), return_exceptions=True)
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=timeout)

    async def _answer(
        self,
        route: _Route,
        request: Request,
        started: float,
        pending: Awaitable[Any],
        span: tracing.Span | None = None,
    ) -> None:
        """Await the handler's reply and answer with it, or with the error reply it earned."""
        name = route.name
        code = "ok"
        try:
            reply = await pending  # InvalidInput: a 400 with a sanitized reason
            # A body over the server's max_payload is refused by nats-py before it is sent (a
            # reply carries no headers), so it costs this request a 500, never the connection.
            await request.respond(_encode(reply))
        except ServiceError as err:
            code = err.code
            await self._respond_error(route, request, err)
        except InvalidInput as err:
            code = err.code
            await self._respond_error(route, request, CATALOGUE[err.code].error(err.message))
        except TRANSIENT_REDIS_ERRORS as err:
            code = UNAVAILABLE.code
            log.warning("request_store_unavailable", endpoint=name, error_type=type(err).__name__)
            await self._respond_error(route, request, UNAVAILABLE.error())
        except Exception as err:  # a bug must cost one request, never the process
            code = INTERNAL_ERROR.code
            log.error("request_failed", exc=True, endpoint=name, error_type=type(err).__name__)
            await self._respond_error(route, request, INTERNAL_ERROR.error())
        finally:
            self._slots.release()
            if span is None:
                route.record(code, time.perf_counter() - started)
            else:
                route.record(code, time.perf_counter() - started, tracing.trace_id_of(span))
                tracing.end(span, outcome=code)

    @staticmethod
    async def _respond_error(route: _Route, request: Request, error: ServiceError) -> None:
        route.count_error(error)
        try:
            await request.respond_error(str(error.status), error.message, data=error_body(error))
        except Exception as exc:  # the requester may be gone, or NATS down: nothing to answer
            log.debug("reply_failed", error_type=type(exc).__name__)


def _start(
    data: bytes,
    decoder: msgspec.json.Decoder[Any],
    handler: Callable[[Any], Awaitable[Any]],
    max_bytes: int = MAX_REQUEST_BYTES,
) -> Awaitable[Any]:
    """Decode the request and call its handler; what either raises is raised again where the
    reply is awaited, so that every failure is answered in one place (`_answer`)."""
    try:
        return handler(decode(data, decoder, max_bytes=max_bytes))
    except Exception as err:
        return _raise(err)


_RUNNER_ID = re.compile(RUNNER_ID_PATTERN)


def _with_runner(handler: Callable[..., Awaitable[Any]], runner: str, request: Any) -> Awaitable[Any]:
    return handler(request, runner)


async def _raise(err: Exception) -> Any:
    raise err
