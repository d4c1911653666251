"""Runners on a running cluster (the decentralized layout): the command's side of
continuity.natsauth. It connects as the system account's user of an operator folder
(`continuity nats init`) to the servers of NATS_URL / --nats-url, and issues or revokes a
runner's account there; nothing is restarted and no file of a server changes.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from continuity.cli import exits
from continuity.cli.connect import nats_url, redacted_url
from continuity.natsauth.issuer import IssueError, Issuer, RunnerAccount
from continuity.natsauth.operator_dir import OperatorDir
from continuity.natsauth.resolver import ResolverError
from shared.platform.bus import jwt

T = TypeVar("T")


def operator_dir(args: argparse.Namespace) -> OperatorDir:
    path = Path(args.operator_dir)
    try:
        return OperatorDir.read(path)
    except (OSError, ValueError, KeyError) as exc:
        raise exits.Failure(
            exits.EXIT_BAD_INPUT,
            "invalid_operator_dir",
            f"{path} is not an operator folder of `continuity nats init` ({type(exc).__name__})",
        ) from None


async def _with_issuer(args: argparse.Namespace, act: Callable[[Issuer], Awaitable[T]]) -> T:
    import nats

    from shared.platform.bus.connection import server_list

    folder = operator_dir(args)
    url = nats_url(args)
    servers = [redacted_url(u) for u in server_list(url)]  # the system user's own creds, not the URL's
    try:
        nc = await asyncio.wait_for(
            nats.connect(
                servers=servers,
                name="continuity-operator-cli",
                user_credentials=str(folder.system_creds),
                connect_timeout=max(1, int(args.timeout)),
                allow_reconnect=False,
                max_reconnect_attempts=1,
            ),
            args.timeout + 1,
        )
    except Exception:
        raise exits.Failure(
            exits.EXIT_UNAVAILABLE,
            "unavailable",
            f"cannot connect to NATS at {redacted_url(url)} as the system user of {args.operator_dir}",
        ) from None
    try:
        return await act(Issuer(nc, folder, servers=args.servers, timeout=args.timeout))
    except IssueError as exc:
        raise exits.Failure(
            exits.EXIT_CONFLICT, "runner_exists" if "has an active" in str(exc) else "not_found", str(exc)
        ) from None
    except ResolverError as exc:
        raise exits.Failure(exits.EXIT_UNAVAILABLE, "resolver_unavailable", str(exc)) from None
    finally:
        await nc.close()


def issue(args: argparse.Namespace) -> RunnerAccount:
    """The runner's account pushed to the servers; its creds in --creds-file (0600, never
    overwritten, written before the push)."""

    def keep(text: str) -> None:
        try:
            jwt.write_secret(Path(args.creds_file), text)
        except FileExistsError:
            raise exits.Failure(
                exits.EXIT_CONFLICT, "creds_exists", f"{args.creds_file} exists; it is never overwritten"
            ) from None

    return asyncio.run(_with_issuer(args, lambda issuer: issuer.issue(args.runner_id, keep)))


def revoke(args: argparse.Namespace) -> RunnerAccount | None:
    """The runner's account revoked on the servers, or None when it has no active account."""

    async def act(issuer: Issuer) -> RunnerAccount | None:
        if await issuer.active(args.runner_id) is None:
            return None
        return await issuer.revoke(args.runner_id)

    return asyncio.run(_with_issuer(args, act))


def accounts(args: argparse.Namespace) -> list[RunnerAccount]:
    return asyncio.run(_with_issuer(args, lambda issuer: issuer.runner_accounts()))


def add_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--operator-dir",
        default=None,
        help=f"{what} on the running servers, with this operator folder of `continuity nats init` "
        "(the decentralized layout: no restart, no file edited)",
    )
    parser.add_argument(
        "--servers",
        type=int,
        default=1,
        help="with --operator-dir: how many servers must confirm each account (the cluster's size)",
    )
