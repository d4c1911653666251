"""The services' Redis users on a real Redis loaded with the shipped ACL file
(deploy/redis/users.acl, completed by deploy/redis/complete-acl.sh as compose, the dev overlay
and deploy.md complete it): the four services and the operator's commands work, every one of
them through its own user, with not one command refused along the way (Redis's `ACL LOG`); no
user may administer the server, touch another service's keys or keys outside Continuity's; a
connection that names no user can do nothing; the console has no user at all."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import yaml
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from continuity.devstack.servers import NatsServer, RedisServer, free_port, redis_server_binary
from continuity.tools import redis_acl
from services import registry
from tests.deploy.conftest import by_kind, render
from tests.support import KEYS, KEYS_ENV, make_config, running

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "redis" / "users.acl"
COMPLETE = REPO / "deploy" / "redis" / "complete-acl.sh"
SERVICES = redis_acl.SERVICE_USERS


@dataclass
class AclRedis:
    server: RedisServer
    passwords: dict[str, str]
    observer: str
    """The password of `observer`, a user of the test's own that reads the ACL log: the shipped
    file has no administrator."""

    def url(self, user: str) -> str:
        return f"redis://{user}:{self.passwords[user]}@127.0.0.1:{self.server.port}/0"

    def client(self, user: str, password: str | None = None) -> aioredis.Redis:
        return aioredis.Redis(
            host="127.0.0.1",
            port=self.server.port,
            username=user,
            password=self.passwords[user] if password is None else password,
        )

    async def refusals(self) -> list[str]:
        """What Redis refused since the log was last reset, one line per entry."""
        client = aioredis.Redis(
            host="127.0.0.1", port=self.server.port, username="observer", password=self.observer
        )
        try:
            entries = await client.execute_command("ACL", "LOG")
        finally:
            await client.aclose()
        found = []
        for entry in entries:
            fields = entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=True))
            text = {(k.decode() if isinstance(k, bytes) else k): v for k, v in fields.items()}
            found.append(" ".join(str(text.get(k, "?")) for k in ("username", "reason", "object", "context")))
        return found


def complete(passwords: dict[str, str], folder: Path) -> str:
    """The shipped rules completed with `passwords`, by the shipped script."""
    folder.mkdir(mode=0o700)
    for user, password in passwords.items():
        (folder / user).write_text(password + "\n")
    done = subprocess.run(
        ["sh", str(COMPLETE), str(RULES), str(folder)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert all(p not in done.stdout + done.stderr for p in passwords.values())  # hashes only
    return done.stdout


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclRedis]:
    work = tmp_path_factory.mktemp("redis-acl")
    passwords = {user.name: secrets.token_hex(16) for user in redis_acl.USERS}
    observer = secrets.token_hex(16)
    text = complete(passwords, work / "passwords") + f"user observer on >{observer} ~* &* +@all\n"
    (work / "users.acl").write_text(text)
    server = RedisServer(work / "redis", extra_args=("--aclfile", str(work / "users.acl")))
    server.start()
    try:
        yield AclRedis(server, passwords, observer)
    finally:
        server.stop()


def test_the_shipped_file_is_what_the_rules_write() -> None:
    assert RULES.read_text() == redis_acl.render(), "run `python -m continuity.tools.redis_acl`"


def test_no_user_may_administer_the_server_and_default_is_off() -> None:
    lines = RULES.read_text().splitlines()
    assert lines[0] == "user default off resetpass resetkeys resetchannels -@all"
    for line in lines:
        words = line.split()
        assert words[2:4] == ["off", "resetpass"], line  # no password, not even a hash
        allowed = {w[1:].split("|")[0] for w in words if w.startswith("+")}
        assert not allowed & redis_acl.FORBIDDEN, line
        assert not any(w.startswith(("+@", "allkeys", "allcommands", "~*", "&")) for w in words), line
    assert {line.split()[1] for line in lines} == {"default", *SERVICES, "probe"}  # no console


COMMAND_LITERAL = re.compile(r"""(?:send|execute|send_to)\(\s*"([A-Z]+)"|\(\s*"([A-Z]+)",""")


def test_every_command_a_service_names_is_allowed_to_it() -> None:
    """A command a service's own code sends (`redis.send("ZCARD", ...)`, a batch's tuples) is in
    its user's list: one added without its permission fails here, before a deployment."""
    found = 0
    for user in redis_acl.USERS:
        if user.name == "probe":
            continue
        package = REPO / "services" / user.name.replace("-", "_")
        named = {
            (a or b).lower()
            for path in package.rglob("*.py")
            for a, b in COMMAND_LITERAL.findall(path.read_text())
        }
        named &= REDIS_COMMANDS
        found += len(named)
        assert named <= set(user.commands), f"{user.name}: {sorted(named - set(user.commands))}"
    assert found >= 10  # the pattern finds the commands at all


REDIS_COMMANDS = frozenset(
    "append copy del exists expire get getdel hdel hexists hget hgetall hincrby hmget hset hsetnx "
    "incr incrby lpush lrange ltrim persist pexpire pttl rpush sadd scan set smembers srem time "
    "zadd zcard zrange zrangebyscore zrem zremrangebyscore zscore wait".split()
)
"""Data commands a service might name, to tell them from other upper-case words in its code."""


async def raw(port: int, *args: str) -> bytes:
    """One command on a fresh connection that has not authenticated, and the reply's first line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"*{len(args)}\r\n".encode() + b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in args))
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 5)
    finally:
        writer.close()


async def test_a_connection_without_a_user_can_do_nothing(acl_redis: AclRedis) -> None:
    port = acl_redis.server.port
    for command in (("PING",), ("GET", "continuity:runners"), ("CONFIG", "GET", "*"), ("FLUSHALL",)):
        assert (await raw(port, *command)).startswith(b"-NOAUTH"), command
    assert (await raw(port, "AUTH", "a-guess")).startswith(b"-WRONGPASS")  # `default` is off
    assert (await raw(port, "AUTH", "default", "a-guess")).startswith(b"-WRONGPASS")
    with pytest.raises(AuthenticationError):
        await acl_redis.client("classifier", password="wrong").ping()


ADMINISTRATION = (
    ("CONFIG", "GET", "requirepass"),
    ("CONFIG", "SET", "appendfsync", "no"),
    ("ACL", "LIST"),
    ("ACL", "SETUSER", "intruder", "on", ">x", "+@all", "~*"),
    ("SHUTDOWN", "NOSAVE"),
    ("REPLICAOF", "127.0.0.1", "1"),
    ("SLAVEOF", "127.0.0.1", "1"),
    ("FLUSHALL",),
    ("KEYS", "*"),
    ("SAVE",),
    ("BGREWRITEAOF",),
    ("CLIENT", "LIST"),
    ("MONITOR",),
    ("SCRIPT", "FLUSH"),
)


@pytest.mark.parametrize("user", [*SERVICES, "probe"])
async def test_no_service_may_administer_the_server(acl_redis: AclRedis, user: str) -> None:
    client = acl_redis.client(user)
    try:
        assert await client.ping()
        for command in ADMINISTRATION:
            with pytest.raises(NoPermissionError):
                await client.execute_command(*command)
        # Nor through a script: commands a script calls are checked against the same user.
        for call in ("redis.call('FLUSHALL')", "redis.call('SET', 'elsewhere', 'x')"):
            with pytest.raises(
                ResponseError,
                match=r"(?i)can't run this command|can't access at least one of the keys|no permissions",
            ):
                await client.execute_command("EVAL", f"return {call}", 0)
        # Keys that are not Continuity's, read or written.
        for command in (("SET", "elsewhere", "x"), ("GET", "elsewhere"), ("DEL", "app:session:1")):
            with pytest.raises(NoPermissionError):
                await client.execute_command(*command)
    finally:
        await client.aclose()


async def test_each_service_is_kept_to_its_own_keys(acl_redis: AclRedis) -> None:
    """A service's keys are not another's to write: the runner directory is the
    session-store's (the classifier only reads it), reconciliation listings the reconciliation
    service's, archive copies the archiver's, recovery budgets the classifier's."""
    refused = {
        "classifier": [
            ("SET", "continuity:runner:{runner:r1}", "{}"),
            ("ZADD", "continuity:reconciliations:open:{rb00}", 1, "x"),
        ],
        "archiver": [
            ("INCR", "continuity:recovery:{tenant:t}:1"),
            ("SET", "continuity:runner:{runner:r1}", "{}"),
        ],
        "session-store": [
            ("HSET", "continuity:run:{t/c/a}:r1", "status", "x"),
            ("SET", "continuity:archive:{t/c/a}:a1", "x"),
        ],
        "reconciliation": [
            ("SADD", "continuity:runners", "r1"),
            ("HSET", "continuity:{compatibility}:declared", "x", "y"),
        ],
        "probe": [("GET", "continuity:session:{t/c/a}")],
    }
    for user, commands in refused.items():
        client = acl_redis.client(user)
        try:
            for command in commands:
                with pytest.raises(NoPermissionError):
                    await client.execute_command(*command)
        finally:
            await client.aclose()
    reader = acl_redis.client("classifier")
    try:
        assert await reader.get("continuity:runner:{runner:r1}") is None  # reading is allowed
    finally:
        await reader.aclose()


async def acontinuity(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`continuity` from the test's event loop, which must keep serving the services meanwhile."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "continuity",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode is not None
    return subprocess.CompletedProcess(list(args), proc.returncode, out.decode(), err.decode())


@pytest.fixture
async def services_on_acl(acl_redis: AclRedis, nats_server: NatsServer) -> AsyncIterator[None]:
    """The four services, each with its own Redis user and nothing else."""
    base = make_config(nats_server.url, "", runner_keys=KEYS, archive_timeout_s=2.0, retry_backoff_s=0.1)
    options = {"reconciliation": {"gauge_interval_s": 0.5, "outbox_grace_s": 1.0, "sweep_interval_s": 0.2}}
    async with contextlib.AsyncExitStack() as stack:
        for name in SERVICES:
            config = replace(base, redis_url=acl_redis.url(name))
            await stack.enter_async_context(running(registry.load(name, **options.get(name, {})), config))
        yield


async def test_the_services_work_through_their_users_and_nothing_is_refused(
    acl_redis: AclRedis, nats_server: NatsServer, services_on_acl: None
) -> None:
    observer = aioredis.Redis(
        host="127.0.0.1", port=acl_redis.server.port, username="observer", password=acl_redis.observer
    )
    await observer.execute_command("ACL", "LOG", "RESET")
    env = {"NATS_URL": nats_server.url, "CONTINUITY_RUNNER_KEYS": KEYS_ENV}
    # Every scenario of the simulated fleet, with an operator resolving and retrying, archives
    # answered, failed and timed out: each service's scripts and reads.
    run = await acontinuity(
        "simulate", "--events", "150", "--seed", "11", "--archive-fail-rate", "0.1",
        "--archive-timeout-rate", "0.1", "--archive-timeout", "2", "--json", "-q", env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert result["contradictions"] == [] and result["events"] >= 150
    # The operator's reads and writes the fleet does not make.
    listed = await acontinuity("runs", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    run_id = json.loads(listed.stdout)["items"][0]["run_id"]
    for args in (
        ("runs", "show", run_id, "--json"),
        ("runs", "explain", run_id, "--json"),
        ("reconciliations", "list", "--json"),
        ("replay", "--json"),
        ("runners", "tenants", "runner-acl", "--tenant", "t1"),
        ("runners", "list", "--json"),
        ("compatibility", "declare", "--adapter", "acl-adapter", "--saved-generation", "g1",
         "--ready-generation", "g2", "--actor", "ops"),
        ("sessions", "preview", "--adapter", "acl-adapter", "--generation", "g2", "--json"),
    ):  # fmt: skip
        done = await acontinuity(*args, env=env)
        assert done.returncode == 0, f"{args}: {done.stdout[-1000:]} {done.stderr[-1000:]}"
    assert await acl_redis.refusals() == []
    # The log does record a refusal: the check above can fail.
    client = acl_redis.client("classifier")
    try:
        with pytest.raises(NoPermissionError):
            await client.execute_command("CONFIG", "GET", "*")
    finally:
        await client.aclose()
        await observer.aclose()
    assert any("classifier" in line and "config" in line for line in await acl_redis.refusals())


def test_the_dev_overlays_redis_has_the_users_and_admits_continuity_alone(tmp_path: Path) -> None:
    """The dev overlay's Redis as rendered: its init container's command completes the ACL from
    the rendered ConfigMap and the placeholder passwords' Secret; Redis started with its
    container's arguments admits each service's URL (from continuity-redis) as that user and
    nothing more, `default` is off, its probe signs in as `probe`; a NetworkPolicy admits only
    Continuity's pods to its port."""
    docs = render("dev")
    redis = by_kind(docs, "StatefulSet")["redis"]["spec"]["template"]["spec"]
    generated = {unhashed(d["metadata"]["name"]): d for d in docs if d["kind"] in ("ConfigMap", "Secret")}
    mounts = {"/etc/redis-acl": tmp_path / "rules", "/etc/redis-passwords": tmp_path / "passwords"}
    mounts |= {"/acl": tmp_path / "acl", "/etc/redis-probe": tmp_path / "probe", "/data": tmp_path / "data"}
    for folder in mounts.values():
        folder.mkdir(mode=0o700)
    for name, content in generated["redis-acl"]["data"].items():
        (mounts["/etc/redis-acl"] / name).write_text(content)
    for name, content in generated["redis-passwords"]["data"].items():
        (mounts["/etc/redis-passwords"] / name).write_bytes(base64.b64decode(content))
    (mounts["/etc/redis-probe"] / "probe").write_bytes(
        base64.b64decode(generated["redis-passwords"]["data"]["probe"])
    )

    def local(arg: str) -> str:
        for inside, outside in mounts.items():
            arg = str(outside) if arg == inside else arg.replace(f"{inside}/", f"{outside}/")
        return arg

    (init,) = redis["initContainers"]
    subprocess.run([local(a) for a in init["command"]], check=True, capture_output=True, timeout=30)
    (container,) = redis["containers"]
    args = [local(a) for a in container["args"]]
    port = free_port()
    proc = subprocess.Popen(
        [redis_server_binary(), *args[1:], "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        probe = [local(a) for a in container["readinessProbe"]["exec"]["command"]]
        probe[-1] = probe[-1].replace("redis-cli ", f"redis-cli -p {port} ")
        wait_until(
            lambda: proc.poll() is None and subprocess.run(probe, capture_output=True).returncode == 0,
            "the probe passes",
        )
        assert asyncio.run(raw(port, "PING")).startswith(b"-NOAUTH")
        urls = {k: base64.b64decode(v).decode() for k, v in generated["continuity-redis"]["data"].items()}
        assert set(urls) == set(SERVICES)
        for url in urls.values():
            client = aioredis.Redis.from_url(url.replace("@redis:6379", f"@127.0.0.1:{port}"))

            async def check(client: aioredis.Redis = client) -> None:
                try:
                    assert await client.ping()
                    with pytest.raises(NoPermissionError):
                        await client.execute_command("CONFIG", "GET", "*")
                finally:
                    await client.aclose()

            asyncio.run(check())
    finally:
        proc.terminate()
        proc.wait(10)
    policy = by_kind(docs, "NetworkPolicy")["redis-ingress"]["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "redis"}
    (rule,) = policy["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "continuity"}}}]
    assert [p["port"] for p in rule["ports"]] == [6379]


def wait_until(condition: Callable[[], bool], what: str, deadline_s: float = 15) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {deadline_s}s"
        time.sleep(0.1)  # polling a server's start with a deadline


def unhashed(name: str) -> str:
    """A generated ConfigMap or Secret name without kustomize's content-hash suffix."""
    return re.sub(r"-[a-z0-9]{10}$", "", name)


def test_the_helm_values_load_the_users_from_their_secret() -> None:
    """The Bitnami chart's Redis reads the ACL file of the Secret `redis-acl` (deploy.md makes it
    with complete-acl.sh), mounted where `aclfile` says; the chart's own ACL values, which write
    users without a password when their Secret cannot be looked up, are not used."""
    values = yaml.safe_load((REPO / "deploy" / "helm" / "redis-values.yaml").read_text())
    [aclfile] = [
        line.split()[1] for line in values["commonConfiguration"].splitlines() if line.startswith("aclfile ")
    ]
    [volume] = values["replica"]["extraVolumes"]
    [mount] = values["replica"]["extraVolumeMounts"]
    assert volume["secret"]["secretName"] == "redis-acl" and mount["name"] == volume["name"]
    assert aclfile == f"{mount['mountPath']}/users.acl" and mount["readOnly"] is True
    assert "acl" not in values["auth"]
    deploy_md = (REPO / "docs" / "operations" / "deploy.md").read_text()
    assert 'sh deploy/redis/complete-acl.sh deploy/redis/users.acl "$acl" "$acl/users.acl"' in deploy_md
    assert (
        'kubectl -n redis create secret generic redis-acl --from-file=users.acl="$acl/users.acl"' in deploy_md
    )
    for user in SERVICES:
        assert f'printf %s "$(rpw {user})" > "$acl/{user}"' in deploy_md


async def test_with_the_charts_password_default_administers_and_the_services_stay_limited(
    tmp_path: Path,
) -> None:
    """As deploy.md completes the file for the chart: `default` with redis-auth's password is the
    chart's own identity; each service's user is as limited as without it."""
    passwords = {name: secrets.token_hex(16) for name in (*SERVICES, "default")}
    (tmp_path / "users.acl").write_text(complete(passwords, tmp_path / "passwords"))
    server = RedisServer(tmp_path / "redis", extra_args=("--aclfile", str(tmp_path / "users.acl")))
    server.start()
    try:
        admin = aioredis.Redis(host="127.0.0.1", port=server.port, password=passwords["default"])
        service = aioredis.Redis(
            host="127.0.0.1", port=server.port, username="session-store", password=passwords["session-store"]
        )
        try:
            assert await admin.config_get("appendonly")
            with pytest.raises(NoPermissionError):
                await service.execute_command("CONFIG", "GET", "*")
            assert (await raw(server.port, "AUTH", "a-guess")).startswith(b"-WRONGPASS")
        finally:
            await admin.aclose()
            await service.aclose()
    finally:
        server.stop()
