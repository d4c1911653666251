"""A pipelining Redis connection for hot request paths.

Every command issued during one event-loop iteration is written in a single batch, and replies
are matched to callers in order, so N concurrent requests cost one write and one read system
call instead of N pool checkouts and round trips. Replies are parsed by hiredis. A connection
is re-established on the next command after it is lost; commands in flight when it is lost
fail with a `ConnectionError` (the caller answers 503 or redelivers).

On Redis Cluster there is one such connection per master: each command goes to the master of
the slot of its first key (`shared.platform.redis.slots`), MOVED updates the slot table and resends, ASK
resends once after ASKING, and the table is reloaded from `CLUSTER SLOTS` after a redirect or
a lost node (a failover). A slot without a master, CLUSTERDOWN and a lost node fail the command
with an error of `store.TRANSIENT_REDIS_ERRORS`. On a single server the command goes straight
to its one connection, as fast as before there was a cluster path.
"""

from __future__ import annotations

import asyncio
import math
import ssl
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import hiredis
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    MovedError,
    NoScriptError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.platform import metrics
from shared.platform.redis import slots
from shared.platform.redis.slots import Address

FLUSH_COMMANDS = 32
"""Commands written at once during a long burst: the first ones reach Redis while the rest are
still being prepared, so Redis works beside this process instead of after it. A shorter burst
is written once, at the end of the loop iteration."""
_REDIRECTS = 5
"""Redirections (MOVED, ASK, TRYAGAIN) one command follows before it fails as transient."""
_TRYAGAIN_DELAY_S = 0.05
_REFRESH_INTERVAL_S = 0.5
"""The slot table is reloaded at most this often after redirects or lost nodes."""


class _Protocol(asyncio.Protocol):
    def __init__(self, owner: _Connection) -> None:
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


class NotEnoughReplicas(RedisError):
    """NOREPLICAS: the master refuses writes while fewer replicas than its
    `min-replicas-to-write` are in sync; transient, like an outage (`store.TRANSIENT_REDIS_ERRORS`)."""


def _response_error(text: str) -> RedisError:
    """The redis-py exception of an error reply, so callers tell redirects and transient
    cluster states from real errors."""
    head = text.split(" ", 1)[0]
    try:
        if head == "NOSCRIPT":
            return NoScriptError(text)
        if head == "MOVED":
            return MovedError(text[6:])
        if head == "ASK":
            return AskError(text[4:])
        if head == "TRYAGAIN":
            return TryAgainError(text)
        if head == "CLUSTERDOWN":
            return ClusterDownError(text)
        if head == "MASTERDOWN":
            return MasterDownError(text)
        if head == "LOADING":
            return BusyLoadingError(text)
        if head == "NOREPLICAS":
            return NotEnoughReplicas("the Redis master has too few replicas in sync to take writes")
    except ValueError:  # a redirect without a readable slot and address stays a plain error
        pass
    return ResponseError(text)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """A caller that stops at an earlier failure may never await this one."""
    if not fut.cancelled():
        fut.exception()


@dataclass(frozen=True)
class _Settings:
    connect_timeout: float
    reply_timeout: float
    ssl: ssl.SSLContext | None = None
    """TLS for every connection (from `shared.platform.tls`); None for plain TCP."""


class _Connection:
    """One auto-pipelined connection to one server (RESP2)."""

    def __init__(
        self,
        address: Address,
        handshake: list[tuple[Any, ...]],
        settings: _Settings,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.address = address
        self._handshake = handshake
        self._settings = settings
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._sent_at: deque[float] = deque()
        self._watchdog: asyncio.Task[None] | None = None
        self._buffer: list[bytes] = []
        self._flush_scheduled = False
        self._connecting: asyncio.Future[None] | None = None
        self._waiting: set[asyncio.Future[Any]] = set()
        """Commands waiting for the connection, cancelled by `aclose`."""

    def send(self, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        if self._transport is None:
            task = asyncio.ensure_future(self._connect_then_send(args))
            self._waiting.add(task)
            task.add_done_callback(self._waited)
            return task
        return self._send(args)

    def _waited(self, task: asyncio.Future[Any]) -> None:
        self._waiting.discard(task)
        _retrieve(task)

    async def connected(self) -> None:
        """Connect now if not connected: commands sent right after go out in their order."""
        if self._transport is None:
            await self._connect()

    async def _connect_then_send(self, args: tuple[Any, ...]) -> Any:
        await self._connect()
        return await self._send(args)

    def _send(self, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._waiters.append(fut)
        self._sent_at.append(loop.time())
        self._buffer.append(hiredis.pack_command(args))
        if len(self._buffer) >= FLUSH_COMMANDS:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
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
        host, port = self.address
        try:
            try:
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(lambda: _Protocol(self), host, port, ssl=self._settings.ssl),
                    self._settings.connect_timeout,
                )
            except (OSError, TimeoutError) as exc:
                metrics.REDIS_ERRORS.inc()
                raise RedisConnectionError(f"cannot connect to Redis ({type(exc).__name__})") from None
            self._transport = transport  # type: ignore[assignment]
            if self._watchdog is None or self._watchdog.done():
                self._watchdog = asyncio.create_task(self._watch())
            if self._handshake:
                replies = [self._send(command) for command in self._handshake]
                await asyncio.wait_for(asyncio.gather(*replies), self._settings.connect_timeout)
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
        timeout = self._settings.reply_timeout
        while self._transport is not None:
            await asyncio.sleep(min(0.5, timeout / 4))
            if self._sent_at and loop.time() - self._sent_at[0] > timeout:
                self._lose(RedisTimeoutError("Redis did not answer in time"))

    def _lose(self, exc: Exception, *, notify: bool = True) -> None:
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
        if notify and self._on_lost is not None:
            self._on_lost()

    async def aclose(self) -> None:
        self._lose(RedisConnectionError("connection closed"), notify=False)
        for task in list(self._waiting):
            task.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()


class PipelinedRedis:
    """`execute_command(*args)` over auto-pipelined connections: one to a single server, or one
    per master of a Redis Cluster.

    `cluster` is `on`, `off` or `auto` (the first command asks the server, `INFO cluster`).
    """

    def __init__(
        self,
        url: str,
        *,
        cluster: str = "auto",
        connect_timeout: float = 2.0,
        reply_timeout: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`ssl_context` comes from `shared.platform.tls`; a `rediss://` URL without one verifies the
        server against the system's trust store."""
        parsed = urlparse(url)
        if ssl_context is None and parsed.scheme == "rediss":
            ssl_context = ssl.create_default_context()
        self._seed: Address = (parsed.hostname or "127.0.0.1", parsed.port or 6379)
        self._db = int((parsed.path or "/0").lstrip("/") or 0)
        password = unquote(parsed.password) if parsed.password else None
        username = unquote(parsed.username) if parsed.username else None
        self._auth: list[tuple[Any, ...]] = []
        if password:
            self._auth.append(("AUTH", username, password) if username else ("AUTH", password))
        self._settings = _Settings(connect_timeout, reply_timeout, ssl_context)
        self._cluster: bool | None = {"on": True, "off": False}.get(cluster)
        self._single: _Connection | None = self._single_connection() if self._cluster is False else None
        self._nodes: dict[Address, _Connection] = {}
        self._table: list[Address | None] | None = None
        self._known: list[Address] = []
        self._detecting: asyncio.Future[None] | None = None
        self._refreshing: asyncio.Future[None] | None = None
        self._closed = False
        self._refreshed_at = -math.inf

    async def execute_command(self, *args: Any) -> Any:
        return await self.send(*args)

    def send(self, *args: Any) -> asyncio.Future[Any]:
        """Queue a command now and return its reply's future: commands sent one after the
        other, before any is awaited, go out in one write (and cost no task each on a single
        server)."""
        single = self._single
        if single is not None:
            return single.send(args)
        return self._spawn(self._routed(args))

    @staticmethod
    def _spawn(coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        task.add_done_callback(_retrieve)
        return task

    def _single_connection(self) -> _Connection:
        handshake = [*self._auth, ("SELECT", self._db)] if self._db else list(self._auth)
        return _Connection(self._seed, handshake, self._settings)

    async def _routed(self, args: tuple[Any, ...]) -> Any:
        if self._cluster is None:
            await self._detect()
        if self._single is not None:
            return await self._single.send(args)
        return await self._cluster_command(args)

    async def _detect(self) -> None:
        task = self._detecting
        if task is None or task.done():  # a failed detection is tried again by the next command
            task = self._detecting = self._spawn(self._ask_mode())
        await asyncio.shield(task)

    async def _ask_mode(self) -> None:
        probe = _Connection(self._seed, list(self._auth), self._settings)
        try:
            info = await probe.send(("INFO", "cluster"))
        finally:
            await probe.aclose()
        if b"cluster_enabled:1" in info:
            self._cluster = True
        else:
            self._single = self._single_connection()
            self._cluster = False

    async def is_cluster(self) -> bool:
        """Whether the server is a node of a Redis Cluster (asked once, unless `cluster` said)."""
        if self._cluster is None:
            await self._detect()
        return bool(self._cluster)

    async def slot_masters(self) -> list[Address | None]:
        """The master of every slot, from a `CLUSTER SLOTS` asked now (None: no master)."""
        await self._refresh()
        assert self._table is not None
        return list(self._table)

    async def send_followed(
        self, args: tuple[Any, ...], follow: Sequence[tuple[Any, ...]]
    ) -> tuple[Any, list[Any]]:
        """`args`, then each of `follow` (WAIT, WAITAOF) right behind it on the same connection:
        its reply, and theirs, which count the writes of that connection up to them."""
        if self._cluster is None:
            await self._detect()
        slot = None if self._single is not None else slots.command_slot(args)
        conn = self._single or await self._master(slot)
        await conn.connected()  # all go out in order, on this connection
        reply, after = conn.send(args), [conn.send(command) for command in follow]
        try:
            result = await reply
        except (MovedError, AskError):
            # The slot moved: the usual redirects, then the followers on the master that took it.
            await asyncio.gather(*after, return_exceptions=True)
            result = await self._cluster_command(args)
            conn = await self._master(slot)
            after = [conn.send(command) for command in follow]
        except BaseException:
            await asyncio.gather(*after, return_exceptions=True)
            raise
        return result, list(await asyncio.gather(*after))

    def send_to(self, address: Address, *args: Any) -> asyncio.Future[Any]:
        """A command for one node of the cluster, whatever slot it names (SCAN, CLUSTER INFO)."""
        return self._node(address).send(args)

    # Redis Cluster

    async def _cluster_command(self, args: tuple[Any, ...]) -> Any:
        if self._db:
            raise ResponseError("Redis Cluster has database 0 only: REDIS_URL names another")
        slot = slots.command_slot(args)
        conn: _Connection | None = None
        asking = False
        error: RedisError = ClusterDownError("CLUSTERDOWN too many redirections")
        for attempt in range(_REDIRECTS):
            if conn is None:
                conn = await self._master(slot)
            try:
                if asking:
                    await conn.connected()
                    conn.send(("ASKING",)).add_done_callback(_retrieve)
                return await conn.send(args)
            except MovedError as err:  # before AskError: MovedError is one
                if slot is not None and self._table is not None:
                    self._table[slot] = (err.host or conn.address[0], err.port)
                self._refresh_soon()
                conn, asking, error = None, False, err
            except AskError as err:
                conn, asking, error = self._node((err.host or conn.address[0], err.port)), True, err
            except TryAgainError as err:  # a multi-key command during a slot migration
                await asyncio.sleep(_TRYAGAIN_DELAY_S * (attempt + 1))
                conn, asking, error = None, False, err
            except (ClusterDownError, RedisConnectionError, RedisTimeoutError):
                self._refresh_soon()
                raise
        raise error

    async def _master(self, slot: int | None) -> _Connection:
        if self._table is None:
            await self._refresh()
        assert self._table is not None
        address = self._table[slot] if slot is not None else next(iter(self._known), self._seed)
        if address is None:
            self._refresh_soon()
            raise ClusterDownError("CLUSTERDOWN no master serves the slot")
        return self._node(address)

    def _node(self, address: Address) -> _Connection:
        conn = self._nodes.get(address)
        if conn is None:
            conn = self._nodes[address] = _Connection(
                address, list(self._auth), self._settings, self._refresh_soon
            )
        return conn

    async def _refresh(self) -> None:
        task = self._refreshing
        if task is None or task.done():
            task = self._refreshing = self._spawn(self._load_table())
        await asyncio.shield(task)

    def _refresh_soon(self) -> None:
        """After a redirect or a lost node: reload the slot table in the background, at most
        once per interval (a failover takes a few of them to show)."""
        if self._closed or (self._refreshing is not None and not self._refreshing.done()):
            return  # closed: a connection reporting its loss after `aclose` starts nothing
        if asyncio.get_running_loop().time() - self._refreshed_at < _REFRESH_INTERVAL_S:
            return
        self._refreshing = self._spawn(self._load_table())

    async def _load_table(self) -> None:
        self._refreshed_at = asyncio.get_running_loop().time()
        for address in dict.fromkeys([*self._known, self._seed]):
            try:
                reply = await self._node(address).send(("CLUSTER", "SLOTS"))
            except (RedisError, OSError):
                continue
            self._table = slots.slot_table(reply, address)
            self._known = slots.node_addresses(reply, address)
            return
        raise RedisConnectionError("no node of the Redis Cluster answered")

    async def aclose(self) -> None:
        self._closed = True
        for task in (self._detecting, self._refreshing):
            if task is not None:
                task.cancel()
        for conn in [self._single, *self._nodes.values()]:
            if conn is not None:
                await conn.aclose()
