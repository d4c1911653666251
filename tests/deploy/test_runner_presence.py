"""What operators see of runners, in the decentralized layout on a 3-node cluster: `continuity
runners list` shows each runner's live connections (from every server, through the system
account's `monitor` user) and its usage against its quotas; a revoked runner that tries its
creds again is counted in `continuity_runner_auth_failures_total` under its id, and credentials
signed by any other account under `unregistered`; the monitor user may do nothing else
(docs/operations/nats-authorization.md, "What operators see of runners")."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from continuity_runner import Runner, RunnerOptions, SessionRef, connect
from nats.aio.client import Client
from prometheus_client import REGISTRY

from continuity.devstack.servers import NatsCluster, RedisServer
from continuity.natsauth import layout, operator_dir
from continuity.natsauth.issuer import Issuer
from continuity.natsauth.operator_dir import OperatorDir
from shared.platform.bus import jwt
from shared.platform.bus.jwt import Key
from shared.platform.bus.monitor import MONITOR_INBOX
from tests.deploy.conftest import live_services, operator_cluster, operator_command
from tests.support import wait_for

pytestmark = pytest.mark.asyncio

SERVICES = ("classifier", "session-store", "archiver", "reconciliation")
FAILURES = "continuity_runner_auth_failures_total"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> OperatorDir:
    return operator_dir.init(tmp_path_factory.mktemp("presence") / "op", "./jwt")


@pytest.fixture(scope="module")
def cluster(folder: OperatorDir, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    with operator_cluster(tmp_path_factory.mktemp("presence-cluster"), folder.path) as nodes:
        yield nodes


@pytest.fixture(scope="module")
async def services(
    folder: OperatorDir, cluster: NatsCluster, redis_server: RedisServer
) -> AsyncIterator[None]:
    # Slow enough that what the runs spent of the burst is still spent when read.
    async with live_services(
        folder.path, cluster.url, redis_server.url, runner_event_rate=0.01, runner_event_burst=50
    ):
        yield


@pytest.fixture
async def system(folder: OperatorDir, cluster: NatsCluster) -> AsyncIterator[Client]:
    nc = await nats.connect(cluster.url.split(","), user_credentials=str(folder.system_creds))
    yield nc
    await nc.close()


async def _cli(folder: OperatorDir, cluster: NatsCluster, *args: str) -> str:
    """`continuity ...` as the folder's operator user; its stdout (it must succeed)."""
    code, out, err = await operator_command(folder.path, cluster.url, *args)
    assert code == 0, err
    return out


async def _listed(folder: OperatorDir, cluster: NatsCluster) -> dict[str, dict[str, Any]]:
    out = json.loads(await _cli(folder, cluster, "runners", "list", "--json"))
    return {item["runner_id"]: item for item in out["items"]}


async def _issue(issuer: Issuer, runner_id: str, creds: Path) -> None:
    def keep(text: str) -> None:
        creds.write_text(text)

    await issuer.issue(runner_id, keep)


async def _runner(cluster: NatsCluster, runner_id: str, creds: Path) -> Runner:
    return await connect(
        RunnerOptions(runner_id=runner_id, servers=cluster.url, creds_file=str(creds), create_consumer=False)
    )


async def _refused(cluster: NatsCluster, creds: Path) -> None:
    """One connection attempt with `creds`, which the servers must refuse."""
    with pytest.raises(nats.errors.Error, match=r"(?i)authorization violation"):
        await nats.connect(
            cluster.url.split(",")[0],
            user_credentials=str(creds),
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=2,
        )


def _failures(runner: str) -> float:
    return REGISTRY.get_sample_value(FAILURES, {"runner": runner}) or 0.0


def _own(item: dict[str, Any], scope: str, owner: str) -> dict[str, Any]:
    return next(u for u in item["usage"] if (u["scope"], u["owner"]) == (scope, owner))


async def test_runners_list_shows_live_connections_and_usage(
    services: None, folder: OperatorDir, cluster: NatsCluster, system: Client, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    on, off, tenant = f"on-{suffix}", f"off-{suffix}", f"t-{suffix}"
    issuer = Issuer(system, folder, servers=3)
    for rid in (on, off):
        await _issue(issuer, rid, tmp_path / f"{rid}.creds")
        await _cli(folder, cluster, "runners", "tenants", rid, "--tenant", tenant)

    runner = await _runner(cluster, on, tmp_path / f"{on}.creds")
    try:
        listed: dict[str, dict[str, Any]] = {}

        async def connected() -> bool:
            listed.update(await _listed(folder, cluster))
            return bool(listed[on]["connections"] == 1)

        await wait_for(connected, timeout=20, what="the connected runner's connection in the list")
        assert listed[off]["connections"] == 0  # issued, not connected
        assert _own(listed[off], "runner", off)["stored_runs"] == 0

        # Some events: three runs of the tenant, each counted against the runner and the tenant.
        session = SessionRef(tenant=tenant, conversation_id=f"c-{suffix}", agent_id="agent")
        for i in range(3):
            await runner.report_resume_failure(f"run-{suffix}-{i}", 1, session, "ns-1")

        async def counted() -> bool:
            listed.update(await _listed(folder, cluster))
            return bool(_own(listed[on], "runner", on)["stored_runs"] == 3)

        await wait_for(counted, timeout=20, what="the runner's stored runs in the list")
        mine, theirs = _own(listed[on], "runner", on), _own(listed[on], "tenant", tenant)
        assert mine["stored_runs_limit"] > 3 and theirs["stored_runs"] == 3
        assert 2.5 <= mine["events_spent"] <= mine["event_burst"] == 50  # three, less a little refill
        assert mine["event_rate"] > 0

        text = await _cli(folder, cluster, "runners", "list")
        watched = text.split("\n\n")[1].splitlines()
        assert watched[0].split() == ["RUNNER", "CONNECTIONS", "EVENTS", "RUNS"]
        rows = {line.split()[0]: line.split() for line in watched[1:]}
        spent = f"{mine['events_spent']:.0f}/50"
        assert rows[on][1:] == ["1", f"{spent}", "@0.01/s", f"3/{mine['stored_runs_limit']}"]
        assert rows[off][1:3] == ["0", "0/50"]
    finally:
        await runner.close()

    async def gone() -> bool:
        return bool((await _listed(folder, cluster))[on]["connections"] == 0)

    await wait_for(gone, timeout=20, what="the closed connection to leave the list")


async def test_a_revoked_runners_refused_connection_is_counted_under_its_id(
    services: None, folder: OperatorDir, cluster: NatsCluster, system: Client, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    gone, tenant = f"gone-{suffix}", f"t-{suffix}"
    creds = tmp_path / "gone.creds"
    issuer = Issuer(system, folder, servers=3)
    await _issue(issuer, gone, creds)
    await _cli(folder, cluster, "runners", "tenants", gone, "--tenant", tenant)
    await (await _runner(cluster, gone, creds)).close()  # its creds work while it is issued
    await _cli(folder, cluster, "runners", "remove", gone, "--yes", "--operator-dir", str(folder.path),
               "--servers", "3")  # fmt: skip

    before, unregistered = _failures(gone), _failures("unregistered")
    await _refused(cluster, creds)
    await wait_for(lambda: _failures(gone) == before + 1, timeout=10, what="the revoked runner's failure")

    # Credentials of the same name signed by an account no operator issued: no runner's.
    stranger = Key.new("account")
    user_key = Key.new("user")
    forged = jwt.encode(layout.user(gone, user_key.public), stranger)
    (tmp_path / "forged.creds").write_text(jwt.creds(forged, user_key.seed))
    await _refused(cluster, tmp_path / "forged.creds")
    await wait_for(
        lambda: _failures("unregistered") >= unregistered + 1, timeout=10, what="the stranger's failure"
    )
    assert _failures(gone) == before + 1


async def test_the_monitor_user_may_only_watch(
    services: None, folder: OperatorDir, cluster: NatsCluster
) -> None:
    errors: list[str] = []

    async def error_cb(exc: Exception) -> None:
        errors.append(str(exc))

    nc = await nats.connect(
        cluster.url.split(","),
        user_credentials=str(folder.monitor_creds),
        inbox_prefix=MONITOR_INBOX,
        error_cb=error_cb,
    )
    try:
        # What it is for: every server's connections.
        inbox = f"{MONITOR_INBOX}.test"
        answers: list[bytes] = []

        async def collect(msg: Any) -> None:
            answers.append(msg.data)

        await nc.subscribe(inbox, cb=collect)
        await nc.publish("$SYS.REQ.SERVER.PING.CONNZ", b"{}", reply=inbox)
        await wait_for(lambda: len(answers) == 3, timeout=5, what="three servers' connz")
        # What it may not: push an account, read the services' subjects, other inboxes.
        await nc.publish("$SYS.REQ.CLAIMS.UPDATE", b"x", reply=inbox)
        await nc.subscribe("continuity.>")
        await nc.subscribe("_INBOX.operator.>")
        await nc.flush()
        await wait_for(lambda: len(errors) >= 3, timeout=5, what="three permission violations")
        assert all("permissions violation" in e.lower() for e in errors), errors
    finally:
        await nc.close()
