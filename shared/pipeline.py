"""A pipelining Redis connection for hot request paths.

Every command issued during one event-loop iteration is written in a single batch, and replies
are matched to callers in order, so N concurrent requests cost one write and one read system
call instead of N pool checkouts and round trips. Replies are parsed by hiredis. The connection
is re-established on the next command after it is lost; commands in flight when it is lost
fail with a `ConnectionError` (the caller answers 503 or redelivers).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any
from urllib.parse import urlparse

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared import metrics


class _Protocol(asyncio.Protocol):
    def __init__(self, owner: PipelinedRedis) -> None:
        self._owner = owner
        self._reader = hiredis.Reader()

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        waiters = self._owner._waiters
        while True:
            reply = self._reader.gets()
            if reply is False:
                return
            if not waiters:  # a reply nobody waits for: the stream is out of step
                self._owner._lose(RedisConnectionError("unexpected reply"))
                return
            fut = waiters.popleft()
            self._owner._sent_at.popleft()
            if fut.done():
                continue
            if isinstance(reply, hiredis.ReplyError):
                fut.set_exception(_response_error(str(reply)))
            else:
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._lose(RedisConnectionError("connection to Redis lost"))


def _response_error(text: str) -> ResponseError:
    if text.startswith("NOSCRIPT"):
        return NoScriptError(text)
    return ResponseError(text)


class PipelinedRedis:
    """`execute_command(*args)` over one auto-pipelined connection (RESP2)."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = 2.0,
        reply_timeout: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`ssl_context` comes from `shared.tls`; a `rediss://` URL without one verifies the
        server against the system's trust store."""
        parsed = urlparse(url)
        if ssl_context is None and parsed.scheme == "rediss":
            ssl_context = ssl.create_default_context()
        self._ssl = ssl_context
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port or 6379
        self._db = int((parsed.path or "/0").lstrip("/") or 0)
        self._password = parsed.password
        self._username = parsed.username
        self._connect_timeout = connect_timeout
        self._reply_timeout = reply_timeout
        self._transport: asyncio.Transport | None = None
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._sent_at: deque[float] = deque()
        self._watchdog: asyncio.Task[None] | None = None
        self._buffer: list[bytes] = []
        self._flush_scheduled = False
        self._connecting: asyncio.Future[None] | None = None

    async def execute_command(self, *args: Any) -> Any:
        return await self.send(*args)

    def send(self, *args: Any) -> asyncio.Future[Any]:
        """Queue a command now and return its reply's future: commands sent one after the
        other, before any is awaited, go out in one write (and cost no task each)."""
        if self._transport is None:
            task = asyncio.ensure_future(self._connect_then_send(args))
            # A caller that stops at an earlier failure may never await this one.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            return task
        return self._send(args)

    async def _connect_then_send(self, args: tuple[Any, ...]) -> Any:
        await self._connect()
        return await self._send(args)

    def _send(self, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._waiters.append(fut)
        self._sent_at.append(loop.time())
        self._buffer.append(hiredis.pack_command(args))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._transport is None or not self._buffer:
            return
        data = b"".join(self._buffer)
        self._buffer.clear()
        self._transport.write(data)

    async def _connect(self) -> None:
        if self._connecting is not None:
            await asyncio.shield(self._connecting)
            return
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_future()
        try:
            try:
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(lambda: _Protocol(self), self._host, self._port, ssl=self._ssl),
                    self._connect_timeout,
                )
            except (OSError, TimeoutError) as exc:
                metrics.REDIS_ERRORS.inc()
                raise RedisConnectionError(f"cannot connect to Redis ({type(exc).__name__})") from None
            self._transport = transport  # type: ignore[assignment]
            if self._watchdog is None or self._watchdog.done():
                self._watchdog = asyncio.create_task(self._watch())
            handshake = []
            if self._password:
                auth = (self._username, self._password) if self._username else (self._password,)
                handshake.append(self._send(("AUTH", *auth)))
            if self._db:
                handshake.append(self._send(("SELECT", self._db)))
            if handshake:
                await asyncio.wait_for(asyncio.gather(*handshake), self._connect_timeout)
            self._connecting.set_result(None)
        except BaseException as exc:
            self._connecting.set_exception(exc)
            self._connecting.exception()  # retrieved: late joiners re-raise through shield
            self._lose(RedisConnectionError("connection to Redis failed"))
            raise
        finally:
            self._connecting = None

    async def _watch(self) -> None:
        """One timer for all commands: a reply overdue past the timeout fails the connection
        (replies come in order, so the oldest waiter is the one to check)."""
        loop = asyncio.get_running_loop()
        while self._transport is not None:
            await asyncio.sleep(min(0.5, self._reply_timeout / 4))
            if self._sent_at and loop.time() - self._sent_at[0] > self._reply_timeout:
                self._lose(RedisTimeoutError("Redis did not answer in time"))

    def _lose(self, exc: Exception) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()
        self._buffer.clear()
        self._sent_at.clear()
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                metrics.REDIS_ERRORS.inc()
                fut.set_exception(exc)
                fut.exception()  # retrieved: awaiting it still raises, not awaiting it is no error

    async def aclose(self) -> None:
        self._lose(RedisConnectionError("connection closed"))
        if self._watchdog is not None:
            self._watchdog.cancel()
