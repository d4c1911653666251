"""The shared stack of the bus suite's modules: each module gets the shipped authorization with its
runners issued (`stack`), a Redis of its own, the services authorized as deployed (`services`;
a module passes settings through `SERVICE_SETTINGS`) and connections closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from continuity.devstack.servers import RedisServer
from tests.deploy.conftest import Stack, authorized_services, inbox, issued_stack
from tests.support.bus import Conn, Opener, connections


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis of the module's own: its runners' runs stay out of other modules' lists."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")
    with issued_stack(tmp_path_factory.mktemp(name)) as issued:
        yield issued


@pytest.fixture(scope="module")
async def services(
    request: pytest.FixtureRequest, stack: Stack, redis_server: RedisServer
) -> AsyncIterator[None]:
    settings: dict[str, Any] = getattr(request.module, "SERVICE_SETTINGS", {})
    async with authorized_services(stack, redis_server.url, **settings):
        yield


@pytest.fixture
async def open_() -> AsyncIterator[Opener]:
    async with connections() as opener:
        yield opener


async def as_user(open_: Opener, stack: Stack, user: str) -> Conn:
    """A connection as `user` of the shipped authorization, with its own inbox prefix."""
    return await open_(stack.url(user), inbox_prefix=inbox(user))
