"""A service whose credentials NATS refuses stops on SIGTERM at once, with one line that says why.

The reported fault: a classifier started with a wrong password against deploy/nats/auth.conf
logged an opaque `nats_error` twice a second and ignored SIGTERM until it was killed (nats-py
tries the servers again inside its `connect`, which never returned). Every service is started
here as a process of its own (`continuity serve <name>`) against a nats-server running the
shipped authorization, with a wrong password for its user."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from continuity.cli.runner_files import ACCOUNTS_FILE, IMPORTS_FILE
from continuity.devstack.servers import RedisServer
from services import registry
from shared.platform.runtime import EXIT_CONFIGURATION
from tests.deploy.conftest import DEPLOY, start_server
from tests.support import ServiceProcess, wait_for

PROMPTLY_S = 5.0
"""SIGTERM to exit: the time of a process that stops at once, with room for a loaded machine."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    work = tmp_path_factory.mktemp("bus-login")
    for name in ("auth.conf", ACCOUNTS_FILE, IMPORTS_FILE):
        shutil.copy(DEPLOY / "nats" / name, work / name)
    log = work / "server.log"
    proc, port = start_server(work, log)
    yield port, log
    proc.terminate()
    proc.wait(timeout=10)


def refusals(server_log: Path, user: str) -> int:
    """The server's authorization failures of `user` so far."""
    pattern = re.compile(rf'authentication error - User "{re.escape(user)}"')
    return len(pattern.findall(server_log.read_text()))


def events(log_path: Path) -> list[dict[str, object]]:
    found = []
    for line in log_path.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


@pytest.mark.parametrize("service", sorted(registry.SERVICES))
async def test_a_service_refused_by_nats_stops_on_sigterm_with_one_clear_line(
    service: str, server: tuple[int, Path], redis_server: RedisServer, tmp_path: Path
) -> None:
    port, server_log = server
    user = "console" if service == "console" else service
    log_path = tmp_path / f"{service}.log"
    process = ServiceProcess(
        service,
        f"nats://{user}:not-its-password@127.0.0.1:{port}",
        redis_server.url,
        log_path,
        CONTINUITY_CONSOLE_DEV_TOKEN="a-development-token-for-tests",
        CONTINUITY_CONSOLE_PORT="0",
    )
    process.start()
    proc = process.proc
    assert proc is not None
    try:
        # Refused three times or more: it has been trying again, as it should, for a while.
        await wait_for(lambda: refusals(server_log, user) >= 3 or proc.poll() is not None, timeout=30,
                       what=f"the server to refuse {user} three times")  # fmt: skip
        assert proc.poll() is None, log_path.read_text()[-2000:]
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(PROMPTLY_S)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"{service} still running {PROMPTLY_S}s after SIGTERM:\n{log_path.read_text()[-2000:]}"
            )
        assert time.monotonic() - start < PROMPTLY_S
    finally:
        process.stop()
    assert code == EXIT_CONFIGURATION
    logged = events(log_path)
    said = [e for e in logged if e.get("event") == "nats_authorization_violation"]
    assert len(said) == 1, logged  # once, not once per try
    assert "not-its-password" not in log_path.read_text()
    assert [e["event"] for e in logged if e.get("event") == "nats_error"] == []
    last = logged[-1]
    assert (last["level"], last["event"], last["cause"], last["exit_code"]) == (
        "error",
        "service_stopped",
        "nats_authorization_violation",
        EXIT_CONFIGURATION,
    )
