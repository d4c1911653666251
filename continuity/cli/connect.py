"""Connecting a command to NATS and asking the services: one bounded try, and every way it can
fail turned into a `Failure` that names the cause."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from continuity.cli.envfile import setting
from continuity.cli.exits import (
    EXIT_AUTHENTICATION,
    EXIT_BAD_INPUT,
    EXIT_BY_STATUS,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    Failure,
)
from continuity.cli.explain import explain, service_for
from continuity.cli.output import report, to_json
from continuity.cli.refusals import Refusals, is_authentication_failure
from shared.contract.client import ContinuityClient, RequestError

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
OPERATOR = "operator"
"""The NATS user of the `continuity` command in deploy/nats/auth.conf, which names its inboxes."""


def redacted_url(url: str) -> str:
    """The URL without credentials, for messages."""
    return re.sub(r"//[^/@]*@", "//", url)


def nats_url(args: argparse.Namespace) -> str:
    return str(args.nats_url or setting("NATS_URL") or DEFAULT_NATS_URL)


def inbox_prefix() -> str:
    """CONTINUITY_NATS_INBOX_PREFIX, else the operator's `_INBOX.operator`: the operator user may
    subscribe only there, so the command's replies reach no other user (a ConfigError when the
    variable is not literal subject tokens)."""
    from shared.platform.config import default_inbox_prefix
    from shared.platform.environment import INBOX_PREFIX_VARIABLE, inbox_prefix_setting

    chosen = inbox_prefix_setting({INBOX_PREFIX_VARIABLE: setting(INBOX_PREFIX_VARIABLE) or ""})
    return chosen or default_inbox_prefix(OPERATOR)


def _record(args: argparse.Namespace, subject: str | None) -> str | None:
    """The record a request to `subject` was about, for a `not_found`."""
    if subject is not None and subject.startswith("continuity.runners.") and getattr(args, "runner_id", None):
        return f"runner {args.runner_id}"
    if service_for(subject) == "session-store" and getattr(args, "conversation", None):
        return f"session {args.tenant}/{args.conversation}/{args.agent}"
    return None


class _NamingClient(ContinuityClient):
    """Remembers the subject of the last request, to name its service in a failure."""

    subject: str | None = None

    async def call(self, subject: str, request: Any, reply_type: Any) -> Any:
        self.subject = subject
        return await super().call(subject, request, reply_type)


async def connect(url: str, timeout: float, refusals: Refusals | None = None) -> Any:
    """One bounded try per server; TLS as the services use it (`tls://` and the
    CONTINUITY_NATS_TLS_* variables, see shared/platform/tls.py)."""
    import nats

    from shared.platform.tls import nats_context_from_env

    tls = nats_context_from_env(url)
    inbox = inbox_prefix()

    async def quiet(_: Exception) -> None:  # failures are reported once, by the command
        return None

    from shared.platform.bus.connection import server_list

    servers = server_list(url)
    # One try per server, bounded: an operator wants an answer, not a reconnect loop.
    return await asyncio.wait_for(
        nats.connect(
            servers=servers,
            name="continuity-operator-cli",
            connect_timeout=max(1, int(timeout)),
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            error_cb=refusals.on_error if refusals is not None else quiet,
            nkeys_seed=os.environ.get("CONTINUITY_NATS_NKEY_SEED_FILE") or None,
            user_credentials=os.environ.get("CONTINUITY_NATS_CREDS_FILE") or None,
            inbox_prefix=inbox,
            tls=tls,
            tls_handshake_first=tls is not None,
        ),
        timeout + 1,
    )


async def connected(args: argparse.Namespace, refusals: Refusals) -> Any:
    """A connection for a command, or the `Failure` that names why there is none: a bad TLS
    setting, refused credentials, a refused certificate, or no server."""
    from shared.platform.config import ConfigError

    url = nats_url(args)
    try:
        return await connect(url, args.timeout, refusals)
    except ConfigError as err:
        raise Failure(EXIT_BAD_INPUT, "invalid_configuration", str(err)) from None
    except Exception as err:
        if refusals.authentication or is_authentication_failure(err):
            raise Failure(
                EXIT_AUTHENTICATION,
                "authentication_failed",
                f"NATS at {redacted_url(url)} refused this client's credentials (authorization "
                f"violation): check the user and password in --nats-url / NATS_URL",
            ) from None
        # A refused certificate is worth naming; its details are in the server's log.
        why = " (TLS handshake failed)" if isinstance(err, ssl.SSLError) else ""
        raise Failure(
            EXIT_UNAVAILABLE, "unavailable", f"cannot connect to NATS at {redacted_url(url)}{why}"
        ) from None


async def session(args: argparse.Namespace, action: Callable[[ContinuityClient], Awaitable[Any]]) -> Any:
    import nats.errors

    refusals = Refusals()
    nc = await connected(args, refusals)
    client = _NamingClient(nc, timeout=args.timeout)
    try:
        return await refusals.race(action(client))
    except RequestError as err:
        exit_code = EXIT_BY_STATUS.get(err.status, EXIT_INTERNAL)
        message = explain(err.code, getattr(args, "run_id", None), err.message, _record(args, client.subject))
        raise Failure(exit_code, err.code, message, err.status) from None
    except nats.errors.NoRespondersError:
        raise Failure(
            EXIT_UNAVAILABLE,
            "unavailable",
            f"no {service_for(client.subject)} service is answering {client.subject or 'the request'}"
            f" at {redacted_url(nats_url(args))}; is it running (`continuity up`)?",
        ) from None
    except (TimeoutError, nats.errors.TimeoutError):
        if refusals.denial is not None:  # the denial came with the timeout: it is the cause
            raise refusals.permission_failure() from None
        raise Failure(
            EXIT_UNAVAILABLE, "timeout", f"no answer within {args.timeout:g}s; retry later"
        ) from None
    finally:
        try:
            await asyncio.wait_for(nc.close(), 2)
        except Exception:  # closing is best effort: the answer is already in hand
            pass


def execute(
    args: argparse.Namespace,
    action: Callable[[ContinuityClient], Awaitable[Any]],
    render: Callable[[Any], str],
    for_json: Callable[[Any], Any] = lambda result: result,
) -> int:
    """Runs `action` against the services and prints its result (rendered, or as JSON), or
    the failure; the exit code."""
    try:
        result = asyncio.run(session(args, action))
    except Failure as failure:
        return report(args, failure)
    print(to_json(for_json(result)) if args.json else render(result))
    return EXIT_OK
