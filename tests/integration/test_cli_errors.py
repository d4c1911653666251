"""The CLI names what NATS refused (docs/operator.md, exit codes): an authentication failure and a
permission denial, against a real nats-server with an authorization config of this test's own
(a user for the services, and users with and without the permissions a command needs)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from continuity.cli.exits import EXIT_AUTHENTICATION, EXIT_NOT_FOUND, EXIT_PERMISSION
from continuity.devstack.servers import NatsServer, RedisServer, free_port
from services import registry
from tests.support import make_config, running

pytestmark = pytest.mark.asyncio

CLI = str(Path(sys.executable).parent / "continuity")
PASSWORD = "pw-Correct-Horse-7"
# publish / subscribe allow lists of each user; `svc` may do anything.
USERS: dict[str, tuple[list[str], list[str]] | None] = {
    "svc": None,
    "ops": (["continuity.>"], ["_INBOX.>"]),
    "sessions_only": (["continuity.sessions.>"], ["_INBOX.>"]),
    "no_inbox": (["continuity.>"], ["elsewhere.>"]),
}


class AuthNatsServer(NatsServer):
    """The project's NATS launcher, with an `authorization` block of users and permissions."""

    def command(self) -> list[str]:
        users = []
        for name, perms in USERS.items():
            entry = f'{{user: "{name}", password: "{PASSWORD}"'
            if perms is not None:
                pub, sub = (", ".join(f'"{s}"' for s in allow) for allow in perms)
                entry += f", permissions: {{publish: {{allow: [{pub}]}}, subscribe: {{allow: [{sub}]}}}}"
            users.append(entry + "}")
        conf = self.data_dir / "auth.conf"
        conf.write_text("authorization {\n  users: [\n    " + "\n    ".join(users) + "\n  ]\n}\n")
        return [*super().command(), "-c", str(conf)]

    def url_for(self, user: str | None, password: str = PASSWORD) -> str:
        return self.url.replace("//", f"//{user}:{password}@") if user else self.url


@pytest.fixture(scope="module")
def auth_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthNatsServer]:
    server = AuthNatsServer(tmp_path_factory.mktemp("nats-auth"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def services(auth_nats: AuthNatsServer, redis_server: RedisServer) -> AsyncIterator[AuthNatsServer]:
    config = make_config(auth_nats.url_for("svc"), redis_server.url)
    async with AsyncExitStack() as stack:
        for app in (registry.load("session-store"), registry.load("reconciliation")):
            await stack.enter_async_context(running(app, config))
        yield auth_nats


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


async def cli(nats_url: str, *args: str) -> Result:
    """The CLI as its own process. The deadline is well under the `--timeout` the denials are
    run with, so a command that waits for an answer instead of naming the denial fails here."""
    proc = await asyncio.create_subprocess_exec(
        CLI,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NATS_URL": nats_url},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 40)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"`continuity {' '.join(args)}` did not finish within 40s") from None
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


SLOW = ("--timeout", "90")  # a denial must be named at once, not after this


async def test_a_user_with_the_permissions_gets_the_services_answer(services: AuthNatsServer) -> None:
    shown = await cli(services.url_for("ops"), "runs", "show", "run-never-seen", "--json", *SLOW)
    assert shown.code == EXIT_NOT_FOUND, shown.err
    assert shown.json()["error"] == {
        "code": "not_found",
        "message": "run run-never-seen is not known here (no such record)",
        "status": 404,
    }


async def test_an_authentication_failure_is_named_with_its_own_exit_code(services: AuthNatsServer) -> None:
    closed = f"nats://127.0.0.1:{free_port()}"
    wrong, anonymous, unknown_user, second_server = await asyncio.gather(
        cli(services.url_for("ops", "wrong-Password-1"), "runs", "show", "run-1", "--json"),
        cli(services.url_for(None), "reconciliations", "list"),
        cli(
            services.url_for("mallory"),
            "sessions",
            "get",
            "--tenant",
            "t",
            "--conversation",
            "c",
            "--agent",
            "a",
        ),
        # The first server is down, the second refuses the credentials: still named as such.
        cli(f"{closed},{services.url_for('ops', 'wrong-Password-1')}", "runs", "show", "run-1"),
    )
    for result in (wrong, anonymous, unknown_user, second_server):
        assert result.code == EXIT_AUTHENTICATION == 6, result.err
        assert "[authentication_failed]" in result.err
        assert "refused this client's credentials" in result.err
        assert "cannot connect" not in result.err
        for secret in ("wrong-Password-1", PASSWORD):
            assert secret not in result.err + result.out
    error = wrong.json()["error"]
    assert error["code"] == "authentication_failed" and "status" not in error


async def test_a_denied_publish_is_named_at_once_not_as_a_timeout(services: AuthNatsServer) -> None:
    url = services.url_for("sessions_only")
    allowed, denied, denied_json = await asyncio.gather(
        cli(url, "sessions", "get", "--tenant", "t", "--conversation", "c", "--agent", "a", *SLOW),
        cli(url, "runs", "show", "run-1", *SLOW),
        cli(url, "reconciliations", "list", "--json", *SLOW),
    )
    # The same user reaches the subjects it may publish to.
    assert allowed.code == EXIT_NOT_FOUND, allowed.err
    assert denied.code == EXIT_PERMISSION == 7, denied.err
    assert "NATS denied this client permission to publish to continuity.runs.get" in denied.err
    assert "[permission_denied]" in denied.err and "no answer within" not in denied.err
    error = denied_json.json()["error"]
    assert denied_json.code == EXIT_PERMISSION
    assert error["code"] == "permission_denied" and "status" not in error
    assert "publish to continuity.reconciliations.list" in error["message"]


async def test_a_denied_reply_subscription_is_named_at_once(services: AuthNatsServer) -> None:
    denied = await cli(services.url_for("no_inbox"), "runs", "show", "run-1", *SLOW)
    assert denied.code == EXIT_PERMISSION, denied.err
    assert "permission to subscribe to its reply inbox (below _INBOX.operator" in denied.err
    assert PASSWORD not in denied.err
