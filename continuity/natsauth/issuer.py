"""Runners issued, listed and revoked on running servers: each runner's account is a JWT signed
by the operator's signing key and pushed to every server's resolver, and `CONTINUITY` imports
each active runner's archive subject through `ARCHIVE` (continuity.natsauth.layout says why).

`ARCHIVE`'s imports are computed again from the resolver's accounts on every change and checked
after the push: two operators issuing at once each push a list, and the one whose list lacks
the other's runner sees it and pushes again, so the last list holds both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client

from continuity.natsauth import layout, resolver
from continuity.natsauth.operator_dir import OperatorDir
from shared.platform.bus import jwt
from shared.platform.bus.jwt import Key

ALL_USERS = "*"
"""A revocation of every user of an account issued until then (nats-io/jwt `All`)."""

SYNC_ATTEMPTS = 5


class IssueError(RuntimeError):
    """The runner already has an active account, or has none to revoke."""


@dataclass(frozen=True)
class RunnerAccount:
    runner_id: str
    account: str
    """The account's public key."""
    users: tuple[str, ...]
    """Its users' public keys (one: the runner's)."""
    revoked: bool
    claims: dict[str, Any]


def _runner_id(claims: dict[str, Any]) -> str | None:
    name = str(claims.get("name", ""))
    return name.removeprefix("RUNNER_") if name.startswith("RUNNER_") else None


def _of(claims: dict[str, Any]) -> RunnerAccount | None:
    runner_id = _runner_id(claims)
    if runner_id is None:
        return None
    nats = claims.get("nats") or {}
    revoked = ALL_USERS in (nats.get("revocations") or {})
    users = tuple(str(u) for u in nats.get("runner_users") or ())
    return RunnerAccount(runner_id, str(claims["sub"]), users, revoked, claims)


class Issuer:
    """Issues and revokes runners through the system account's connection `nc`, with the keys
    of an operator folder. `servers` is how many servers must store each account."""

    def __init__(self, nc: Client, operator: OperatorDir, servers: int = 1, timeout: float = 5.0) -> None:
        self.nc, self.operator, self.servers, self.timeout = nc, operator, servers, timeout

    async def runner_accounts(self) -> list[RunnerAccount]:
        keys = await resolver.accounts(self.nc, self.timeout)
        tokens = await asyncio.gather(*(resolver.lookup(self.nc, k, self.timeout) for k in keys))
        found = []
        for token in tokens:
            if token is None:
                continue
            runner = _of(jwt.decode(token))
            if runner is not None:
                found.append(runner)
        return found

    async def active(self, runner_id: str) -> RunnerAccount | None:
        return next(
            (a for a in await self.runner_accounts() if a.runner_id == runner_id and not a.revoked), None
        )

    async def issue(self, runner_id: str, keep_creds: Callable[[str], None]) -> RunnerAccount:
        """A new account and user for `runner_id`: the user's creds file text goes to
        `keep_creds` before anything reaches a server (a creds file that cannot be written
        issues nothing), then the account is pushed and ARCHIVE imports its archive subject."""
        if await self.active(runner_id) is not None:
            raise IssueError(f"runner {runner_id} has an active account")
        account_key, user_key = Key.new("account"), Key.new("user")
        claims, user = layout.runner_claims(
            runner_id, account_key.public, user_key.public, self.operator.continuity
        )
        claims["nats"]["runner_users"] = [user_key.public]
        # The account's seed signs its one user and is dropped: nobody can add another.
        keep_creds(jwt.creds(jwt.encode(user, account_key), user_key.seed))
        await resolver.push(
            self.nc, jwt.encode(claims, self.operator.signing), expect=self.servers, timeout=self.timeout
        )
        await self.sync()
        return RunnerAccount(runner_id, account_key.public, (user_key.public,), False, claims)

    async def revoke(self, runner_id: str) -> RunnerAccount:
        """Every user of the runner's active account revoked (the servers close their
        connections and refuse their creds), and its archive import dropped from ARCHIVE."""
        runner = await self.active(runner_id)
        if runner is None:
            raise IssueError(f"runner {runner_id} has no active account")
        claims = dict(runner.claims)
        nats = dict(claims["nats"])
        nats["revocations"] = {**(nats.get("revocations") or {}), ALL_USERS: int(time.time()) + 1}
        claims["nats"] = nats
        for field in ("iss", "iat", "jti"):
            claims.pop(field, None)
        await resolver.push(
            self.nc, jwt.encode(claims, self.operator.signing), expect=self.servers, timeout=self.timeout
        )
        await self.sync()
        return RunnerAccount(runner_id, runner.account, runner.users, True, claims)

    async def sync(self) -> dict[str, str]:
        """ARCHIVE's imports set to the active runners' archive subjects, pushed until a server
        holds a list with all of them."""
        for _ in range(SYNC_ATTEMPTS):
            archives = {a.runner_id: a.account for a in await self.runner_accounts() if not a.revoked}
            claims = layout.archive_account(self.operator.archive, archives)
            await resolver.push(
                self.nc, jwt.encode(claims, self.operator.signing), expect=self.servers, timeout=self.timeout
            )
            held = await resolver.lookup(self.nc, self.operator.archive, self.timeout)
            imports = (jwt.decode(held).get("nats") or {}).get("imports") or [] if held else []
            if {i["account"] for i in imports} == set(archives.values()):
                return archives
        raise resolver.ResolverError("ARCHIVE's imports kept changing; run the command again")
