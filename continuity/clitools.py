"""What every client command shares: connecting to NATS, exit codes scripts can rely on,
messages for people that explain each error code, JSON for scripts, argument checks."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from shared.client import ContinuityClient, RequestError
from shared.contracts import errors
from shared.contracts.types import TOKEN_PATTERN

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
EXIT_OK = 0
EXIT_CONFLICT = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_UNAVAILABLE = 4
EXIT_INTERNAL = 5
EXIT_AUTHENTICATION = 6
EXIT_PERMISSION = 7

EXIT_BY_STATUS = {400: EXIT_BAD_INPUT, 404: EXIT_NOT_FOUND, 409: EXIT_CONFLICT, 503: EXIT_UNAVAILABLE}
_TOKEN = re.compile(TOKEN_PATTERN)


class Failure(Exception):
    """A command's failure: an exit code, a closed code, and a message for people."""

    def __init__(self, exit_code: int, code: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.code = code
        self.message = message
        self.status = status


# What each error code means for the command that got it, and what to do next: one entry for
# every code of the catalogue (shared/contracts/errors.py).
def explain(code: str, run_id: str | None, fallback: str) -> str:
    run = f"run {run_id}" if run_id else "the run"
    messages = {
        errors.NOT_FOUND.code: f"{run} is not known here (no such record)",
        errors.EXECUTION_RECONCILIATION_CONFLICT.code: (
            f"{run} was already resolved with another outcome; see `continuity reconciliations show {run_id}`"
        ),
        errors.EXECUTION_RECONCILIATION_ALREADY_DELIVERED.code: (
            f"{run} was already resolved with this outcome; its decision was delivered, nothing to do"
        ),
        errors.RECONCILIATION_REQUIRED.code: (
            f"{run} waits on a reconciliation, it cannot be retried: record what the pending tool "
            f"call did with `continuity reconciliations resolve {run_id} --outcome ...`"
        ),
        errors.RUN_NOT_STOPPED.code: f"{run} is not stopped for an operator: {fallback}",
        errors.OPERATOR_RETRY_ALREADY_DELIVERED.code: (
            f"a fresh continuation was already delivered for this attempt of {run}; nothing to do"
        ),
        errors.RUN_CHANGED.code: f"{run} changed while the request was handled; show it and try again",
        errors.REVISION_CONFLICT.code: (
            "the record changed since the given --expected-revision; get it and retry"
        ),
        errors.STALE_EPOCH.code: (
            "the session was replaced since the given --epoch; this writer is fenced out"
        ),
        errors.SESSION_HELD.code: "the session is held for an operator; commit a new native session instead",
        errors.MISSING_FIELD.code: f"the request was rejected: {fallback}",
        errors.INVALID_FIELD.code: f"the request was rejected: {fallback}",
        errors.MALFORMED_JSON.code: f"the request was rejected: {fallback}",
        errors.PAYLOAD_TOO_LARGE.code: f"the request was rejected: {fallback}",
        errors.UNAVAILABLE.code: "the service's store is unavailable; retry later",
        "draining": "the service is shutting down; retry in a moment",
        errors.INTERNAL_ERROR.code: "the service failed on this request; see its logs",
    }
    return messages.get(code, fallback or code)


def redacted_url(url: str) -> str:
    """The URL without credentials, for messages."""
    return re.sub(r"//[^/@]*@", "//", url)


def nats_url(args: argparse.Namespace) -> str:
    return str(args.nats_url or os.environ.get("NATS_URL") or DEFAULT_NATS_URL)


class Refusals:
    """What the NATS server refused this client, as nats-py reports it: an authentication
    failure (`Authorization Violation`) when connecting, a permission denial (`Permissions
    Violation for Publish to ...` / `... for Subscription to ...`) through the error callback
    while the connection stays open. The server's text is matched, never shown."""

    def __init__(self) -> None:
        self.authentication = False
        self.denial: str | None = None
        self.denied = asyncio.Event()

    async def on_error(self, err: Exception) -> None:  # the connection's error callback
        if is_authentication_failure(err):
            self.authentication = True
        elif (denial := permission_denial(err)) is not None and self.denial is None:
            self.denial = denial
            self.denied.set()

    async def race(self, work: Awaitable[Any]) -> Any:
        """`work`'s result, unless the server denies a permission first: then a Failure at
        once, instead of a wait for an answer that cannot come."""
        task = asyncio.ensure_future(work)
        denied = asyncio.create_task(self.denied.wait())
        try:
            await asyncio.wait({task, denied}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            denied.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise self.permission_failure()
        return task.result()

    def permission_failure(self) -> Failure:
        return Failure(
            EXIT_PERMISSION,
            "permission_denied",
            f"NATS denied this client permission to {self.denial}; the user of --nats-url / "
            f"NATS_URL needs that permission (docs/operations/nats-authorization.md)",
        )


_AUTHENTICATION_TEXT = ("authorization violation", "authentication expired", "authentication timeout")
_PERMISSION = re.compile(r"permissions violation for (publish|subscription) to \"?([^\s\"']*)")
_SUBJECT_SAFE = re.compile(r"[^A-Za-z0-9_.$*>-]")


def is_authentication_failure(err: BaseException) -> bool:
    import nats.errors

    if isinstance(err, nats.errors.AuthorizationError | nats.errors.InvalidUserCredentialsError):
        return True
    text = str(err).lower()
    return any(t in text for t in _AUTHENTICATION_TEXT)


def permission_denial(err: BaseException) -> str | None:
    """`publish to <subject>` or `subscribe to <subject>` for a permission violation."""
    match = _PERMISSION.search(str(err).lower())
    if match is None:
        return None
    verb, subject = match.groups()
    # nats-py lowercases the server's text, so an inbox's name is not shown as it really is.
    if subject.startswith("_inbox."):
        return "subscribe to its reply inbox (_INBOX.>)"
    subject = _SUBJECT_SAFE.sub("?", subject)[:128] or "a subject"
    return f"{'publish' if verb == 'publish' else 'subscribe'} to {subject}"


async def connect(url: str, timeout: float, refusals: Refusals | None = None) -> Any:
    """One bounded try per server; TLS as the services use it (`tls://` and the
    CONTINUITY_NATS_TLS_* variables, see shared/tls.py)."""
    import nats

    from shared.tls import nats_context_from_env

    tls = nats_context_from_env(url)

    async def quiet(_: Exception) -> None:  # failures are reported once, by the command
        return None

    from shared.bus.connection import server_list

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
            tls=tls,
            tls_handshake_first=tls is not None,
        ),
        timeout + 1,
    )


async def session(args: argparse.Namespace, action: Callable[[ContinuityClient], Awaitable[Any]]) -> Any:
    import nats.errors

    from shared.config import ConfigError

    url = nats_url(args)
    refusals = Refusals()
    try:
        nc = await connect(url, args.timeout, refusals)
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
    try:
        return await refusals.race(action(ContinuityClient(nc, timeout=args.timeout)))
    except RequestError as err:
        exit_code = EXIT_BY_STATUS.get(err.status, EXIT_INTERNAL)
        raise Failure(
            exit_code, err.code, explain(err.code, getattr(args, "run_id", None), err.message), err.status
        ) from None
    except nats.errors.NoRespondersError:
        raise Failure(
            EXIT_UNAVAILABLE, "unavailable", "no reconciliation service is answering; is it running?"
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
    try:
        result = asyncio.run(session(args, action))
    except Failure as failure:
        return report(args, failure)
    print(to_json(for_json(result)) if args.json else render(result))
    return EXIT_OK


def report(args: argparse.Namespace, failure: Failure) -> int:
    if getattr(args, "json", False):
        error: dict[str, Any] = {"code": failure.code, "message": failure.message}
        if failure.status is not None:
            error["status"] = failure.status
        print(to_json({"error": error}))
    print(f"continuity: error: {failure.message} [{failure.code}]", file=sys.stderr)
    return failure.exit_code


def to_json(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()


# Validation of arguments, before anything is sent ------------------------------------------


def token(what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not _TOKEN.match(value):
            raise argparse.ArgumentTypeError(f"{what} must be 1 to 128 of A-Z a-z 0-9 . _ : -")
        return value

    return check


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)


def connection_parent() -> argparse.ArgumentParser:
    """The options every client command takes (use as `parents=[...]`)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--nats-url", default=None, help=f"NATS URL (default: $NATS_URL, else {DEFAULT_NATS_URL})"
    )
    common.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of tables")
    common.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for an answer (default 5)"
    )
    return common


def fields(value: Any) -> str:
    """A record as aligned `name  value` lines."""
    builtins = msgspec.to_builtins(value)
    width = max(len(k) for k in builtins)
    return "\n".join(f"{k.ljust(width)}  {_show(v)}" for k, v in builtins.items())


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return msgspec.json.encode(value).decode()
    return str(value)
