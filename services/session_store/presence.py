"""What the NATS servers say of the runners, for `continuity.runners.list` (contract 10.2): each
runner's open client connections, and the connections the servers refuse, counted per runner
in `continuity_runner_auth_failures_total{runner}`.

The session-store opens a second connection for it, as the system account's `monitor` user
(shared.platform.bus.monitor; deploy/nats/auth.conf gives the config-file layout's
the same): it may ask every server for its connections (`$SYS.REQ.SERVER.PING.CONNZ`), look up
an account's JWT, hear the servers' authentication failures and read its own inbox; nothing it
may do changes a server. Without CONTINUITY_NATS_MONITOR_CREDS_FILE or _PASSWORD_FILE there is
no such connection and the connections are unknown (`null`).

Whom a connection belongs to comes from the servers, never from a client: the account of an
open connection (`RUNNER_<runner_id>`: its name in the config-file layout, its JWT's name tag in
the decentralized one). A refused connection has no account; in the decentralized layout the
user JWT it presented names one, and the failure is counted under a runner only when that JWT's
signature holds, the resolver's account of its signer is `RUNNER_<runner_id>` and the runner
directory holds that runner: a client cannot mint a label value, nor charge a runner whose
account did not sign its credentials. Anything else is `unregistered`.

Usage is read from Redis with shared.records.quotas (one round trip per runner and tenant).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

from shared.contract.tenancy import ListedRunner, QuotaUsage, RunnerRecord
from shared.platform import environment, metrics, tls
from shared.platform.bus import jwt
from shared.platform.bus.connection import Stopped, connect, redacted, server_list
from shared.platform.bus.monitor import MONITOR_INBOX, MONITOR_USER
from shared.platform.config import Config
from shared.platform.logs import Log
from shared.platform.parts import Task
from shared.platform.redis import Redis
from shared.records import quotas
from shared.records.runners import RunnerDirectory

log = Log("session-store")

CONNZ = "$SYS.REQ.SERVER.PING.CONNZ"
AUTH_ERRORS = "$SYS.SERVER.*.CLIENT.AUTH.ERR"
LOOKUP = "$SYS.REQ.ACCOUNT.{account}.CLAIMS.LOOKUP"
RUNNER_ACCOUNT = "RUNNER_"
UNREGISTERED = "unregistered"
PAGE = 256
"""Connections per server per answer: a page stays far below the servers' payload limit."""
MAX_PAGES = 64
ANSWER_S = 0.5
"""How long a request waits for the servers' answers (all of them known: until they came)."""
MAX_ACCOUNTS = 10_000
"""Accounts whose runner is remembered: a client presenting ever new JWTs costs one lookup each."""


def runner_of_connection(conn: Mapping[str, Any]) -> str | None:
    """The runner a server's connz entry belongs to: its account's name tag (decentralized
    layout) or its account (config-file layout) when that is `RUNNER_<runner_id>`."""
    for name in (conn.get("name_tag"), conn.get("account")):
        if isinstance(name, str) and name.startswith(RUNNER_ACCOUNT) and len(name) > len(RUNNER_ACCOUNT):
            return name.removeprefix(RUNNER_ACCOUNT)
    return None


def count_connections(pages: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Open connections per runner, from the servers' connz answers."""
    counts: collections.Counter[str] = collections.Counter()
    for answer in pages:
        for conn in (answer.get("data") or {}).get("connections") or []:
            runner = runner_of_connection(conn)
            if runner is not None:
                counts[runner] += 1
    return dict(counts)


def _more(answer: Mapping[str, Any]) -> bool:
    data = answer.get("data") or {}
    shown = len(data.get("connections") or [])
    return int(data.get("offset") or 0) + shown < int(data.get("total") or 0) and shown > 0


def monitor_login(config: Config) -> dict[str, Any] | None:
    """nats-py's credentials of the monitor user, or None when none is configured."""
    if config.nats_monitor_creds_file:
        return {"user_credentials": config.nats_monitor_creds_file}
    if config.nats_monitor_password_file:
        password = environment.password_of(
            config.nats_monitor_password_file, "CONTINUITY_NATS_MONITOR_PASSWORD_FILE"
        )
        return {"user": MONITOR_USER, "password": password}
    return None


class Presence:
    """The monitor connection: connected in the background, asked on each list request."""

    def __init__(self, config: Config, directory: RunnerDirectory) -> None:
        self.config = config
        self.directory = directory
        self.nc: Client | None = None
        self.servers = 0
        """The most servers that answered one request: how many answers to wait for."""
        self._runner_of_account: dict[str, str | None] = {}

    def part(self) -> Task:
        return Task(self._run, name="runner-presence")

    async def _run(self, stop: asyncio.Event) -> None:
        login = monitor_login(self.config)
        assert login is not None
        servers = ",".join(redacted(url) for url in server_list(self.config.nats_url))
        try:
            nc = await connect(
                servers,
                "continuity-session-store-monitor",
                tls=tls.nats_context(self.config),
                stop=stop,
                inbox_prefix=MONITOR_INBOX,
                **login,
            )
        except Stopped:
            return
        self.nc = nc
        try:
            await nc.subscribe(AUTH_ERRORS, cb=self._refused)
            await self.connections()  # learns how many servers answer
            await stop.wait()
        finally:
            self.nc = None
            with contextlib.suppress(Exception):
                await nc.close()

    # -- connections ---------------------------------------------------------------------------

    async def _ask(self, nc: Client, subject: str, payload: bytes, expect: int) -> list[Msg]:
        """Answers to one request: `expect` of them, or those that came within ANSWER_S."""
        answers: list[Msg] = []
        enough = asyncio.Event()

        async def collect(msg: Msg) -> None:
            answers.append(msg)
            if expect and len(answers) >= expect:
                enough.set()

        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, cb=collect)
        try:
            await nc.publish(subject, payload, reply=inbox)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(enough.wait(), ANSWER_S)
        finally:
            await sub.unsubscribe()
        return answers

    async def connections(self) -> dict[str, int] | None:
        """Open connections per runner on every server that answers; None when unknown."""
        nc = self.nc
        if nc is None or not nc.is_connected:
            return None
        pages: list[dict[str, Any]] = []
        for page in range(MAX_PAGES):
            ask = {"offset": page * PAGE, "limit": PAGE, "auth": True}
            answers = [
                json.loads(m.data or b"{}")
                for m in await self._ask(nc, CONNZ, json.dumps(ask).encode(), self.servers)
            ]
            if page == 0:
                if not answers:
                    return None
                self.servers = max(self.servers, len(answers))
            pages.extend(answers)
            if not any(_more(a) for a in answers):
                break
        return count_connections(pages)

    # -- refused connections -------------------------------------------------------------------

    async def _refused(self, msg: Msg) -> None:
        try:
            event = json.loads(msg.data or b"{}")
            token = (event.get("client") or {}).get("jwt")
            runner = await self._runner_of_jwt(token) if isinstance(token, str) else None
            if runner is not None and await self.directory.read(runner) is None:
                runner = None
        except Exception as exc:  # a failure is still counted, under no runner
            log.warning("auth_failure_unattributed", error_type=type(exc).__name__)
            runner = None
        metrics.labelled(metrics.RUNNER_AUTH_FAILURES, runner or UNREGISTERED).inc()

    async def _runner_of_jwt(self, token: str) -> str | None:
        """The runner whose account signed this user JWT (None: no runner's, or not verifiable)."""
        try:
            claims = jwt.decode(token)
        except jwt.JWTError:
            return None
        account = str(claims["iss"])
        if account not in self._runner_of_account:
            if len(self._runner_of_account) >= MAX_ACCOUNTS:
                self._runner_of_account.clear()
            self._runner_of_account[account] = await self._account_runner(account)
        runner = self._runner_of_account[account]
        return runner if runner is not None and claims.get("name") == runner else None

    async def _account_runner(self, account: str) -> str | None:
        nc = self.nc
        if nc is None or not account.startswith("A"):
            return None
        answers = await self._ask(nc, LOOKUP.format(account=account), b"", 1)
        if not answers or not answers[0].data or answers[0].data.startswith(b"{"):
            return None
        try:
            claims = jwt.decode(answers[0].data.decode())
        except jwt.JWTError:
            return None
        if claims.get("sub") != account:
            return None
        return runner_of_connection({"name_tag": claims.get("name")})


async def listed(
    records: list[RunnerRecord], redis: Redis, config: Config, presence: Presence | None
) -> list[ListedRunner]:
    """The directory's records with each runner's usage and open connections."""
    connections = await presence.connections() if presence is not None else None
    usages = await asyncio.gather(*(_usage(redis, config, r) for r in records))
    return [
        ListedRunner(
            **msgspec.structs.asdict(r),
            usage=usage,
            connections=None if connections is None else connections.get(r.runner_id, 0),
        )
        for r, usage in zip(records, usages, strict=True)
    ]


async def _usage(redis: Redis, config: Config, record: RunnerRecord) -> list[QuotaUsage]:
    found = await quotas.usage(redis, config, record.runner_id)
    for tenant in record.tenants:
        found += (await quotas.usage(redis, config, record.runner_id, tenant))[1:]
    return [
        QuotaUsage(
            scope=u.scope,
            owner=u.owner,
            event_rate=u.event_rate,
            event_burst=u.event_burst,
            events_spent=round(u.events_spent, 3),
            stored_runs=u.stored_runs,
            stored_runs_limit=u.stored_runs_limit,
        )
        for u in found
    ]
