"""What operators see of runners in the config-file layout (deploy/nats/auth.conf, as compose,
the dev overlay and Helm ship it): with the session-store's password of SYS's `monitor` user
(CONTINUITY_NATS_MONITOR_PASSWORD_FILE), `continuity runners list` shows a connected runner's
one connection and an unconnected runner's none; a refused login is counted in
`continuity_runner_auth_failures_total` under `unregistered` (the server's event names no
runner in this layout); and the monitor user may do nothing but watch
(docs/operations/nats-authorization.md, "What operators see of runners")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from prometheus_client import REGISTRY

from continuity.devstack.servers import RedisServer
from shared.platform.bus.jwt import Key
from shared.platform.bus.monitor import MONITOR_INBOX, MONITOR_USER
from tests.deploy.conftest import PASSWORDS, Stack, acontinuity, authorized_services, inbox, issued_stack
from tests.support import wait_for

pytestmark = pytest.mark.asyncio

ON, OFF = "runner-a", "runner-b"
FAILURES = "continuity_runner_auth_failures_total"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with issued_stack(tmp_path_factory.mktemp("presence-conf")) as issued:
        yield issued


@pytest.fixture(scope="module")
def monitor_password_file(stack: Stack) -> Path:
    """The session-store's file with the password of `monitor`, as compose and Kubernetes mount it."""
    path = stack.conf_dir / "nats-monitor-password"
    path.write_text(PASSWORDS[MONITOR_USER] + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
async def services(
    stack: Stack, redis_server: RedisServer, monitor_password_file: Path
) -> AsyncIterator[None]:
    async with authorized_services(
        stack, redis_server.url, nats_monitor_password_file=str(monitor_password_file)
    ):
        yield


async def listed(stack: Stack, *options: str) -> str:
    """`continuity runners list` as the operator; its stdout (it must succeed)."""
    done = await acontinuity("runners", "list", *options, "--nats-url", stack.url("operator"))
    assert done.returncode == 0, done.stderr
    return done.stdout


async def connections(stack: Stack) -> dict[str, Any]:
    items = json.loads(await listed(stack, "--json"))["items"]
    return {item["runner_id"]: item["connections"] for item in items}


async def runner(stack: Stack, runner_id: str) -> Client:
    return await nats.connect(stack.url(), inbox_prefix=inbox(runner_id), **stack.auth(runner_id))


def failures(label: str) -> float:
    return REGISTRY.get_sample_value(FAILURES, {"runner": label}) or 0.0


async def test_runners_list_shows_each_runners_live_connections(services: None, stack: Stack) -> None:
    nc = await runner(stack, ON)
    try:
        seen: dict[str, Any] = {}

        async def connected() -> bool:
            seen.update(await connections(stack))
            return bool(seen[ON] == 1)

        await wait_for(connected, timeout=20, what="the connected runner's connection in the list")
        assert seen[OFF] == 0  # issued, not connected

        watched = (await listed(stack)).split("\n\n")[1].splitlines()
        assert watched[0].split()[:2] == ["RUNNER", "CONNECTIONS"]
        rows = {line.split()[0]: line.split()[1] for line in watched[1:]}
        assert (rows[ON], rows[OFF]) == ("1", "0")
    finally:
        await nc.close()

    async def gone() -> bool:
        return bool((await connections(stack))[ON] == 0)

    await wait_for(gone, timeout=20, what="the closed connection to leave the list")


async def test_a_refused_login_is_counted_under_no_runner(
    services: None, stack: Stack, tmp_path: Path
) -> None:
    """An NKEY no account holds, and the monitor user's name with another's password."""
    before = failures("unregistered")
    stranger = tmp_path / "stranger.nk"
    stranger.write_bytes(Key.new("user").seed)
    attempts = (
        {"servers": stack.url(), "nkeys_seed": str(stranger)},
        {"servers": stack.url(), "user": MONITOR_USER, "password": PASSWORDS["operator"]},
    )
    for options in attempts:
        with pytest.raises(nats.errors.Error, match=r"(?i)authorization violation"):
            await nats.connect(**options, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)
    await wait_for(
        lambda: failures("unregistered") >= before + len(attempts), timeout=10, what="the refused logins"
    )
    assert failures(ON) == failures(OFF) == 0.0


async def test_the_monitor_user_may_only_watch(services: None, stack: Stack) -> None:
    errors: list[str] = []

    async def error_cb(exc: Exception) -> None:
        errors.append(str(exc))

    nc = await nats.connect(stack.url(MONITOR_USER), inbox_prefix=MONITOR_INBOX, error_cb=error_cb)
    try:
        # What it is for: the server's connections, the session-store's among them.
        answer = json.loads((await nc.request("$SYS.REQ.SERVER.PING.CONNZ", b"{}", timeout=5)).data)
        assert answer["data"]["num_connections"] >= 4
        # What it may not: push or ask for anything else, read the services' subjects or
        # another user's inbox.
        forbidden = (
            "$SYS.REQ.CLAIMS.UPDATE",
            "$SYS.REQ.SERVER.PING.STATZ",
            f"$SYS.REQ.ACCOUNT.RUNNER_{ON}.CONNZ",
            "continuity.runners.list",
        )
        for subject in forbidden:
            await nc.publish(subject, b"{}", reply=f"{MONITOR_INBOX}.x")
        await nc.subscribe("continuity.>")
        await nc.subscribe("_INBOX.operator.>")
        await nc.flush()

        wanted = len(forbidden) + 2
        await wait_for(lambda: len(errors) >= wanted, timeout=5, what="the permission violations")
        assert all("permissions violation" in e.lower() for e in errors), errors
        for subject in forbidden:
            assert any(subject.lower() in e.lower() for e in errors), (subject, errors)
    finally:
        await nc.close()
    assert len(stack.violations_of((MONITOR_USER,), deliberate=())) >= len(forbidden)
