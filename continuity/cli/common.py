"""What every client command shares: connecting to NATS, exit codes scripts can rely on,
messages for people that explain each error code, JSON for scripts, argument checks."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shlex
import ssl
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import msgspec

from shared.contract import errors
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.types import RUNNER_ID_PATTERN, TOKEN_PATTERN

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
_RUNNER_ID = re.compile(RUNNER_ID_PATTERN)


class Failure(Exception):
    """A command's failure: an exit code, a closed code, and a message for people."""

    def __init__(self, exit_code: int, code: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.code = code
        self.message = message
        self.status = status


# The service behind each request subject: the one to name when nobody answers.
SERVICE_BY_SUBJECT: dict[str, str] = {
    "continuity.sessions.": "session-store",
    "continuity.runners.": "session-store",
    "continuity.reconciliations.": "reconciliation",
    "continuity.runs.": "reconciliation",
    "continuity.operator.": "reconciliation",
}


def service_for(subject: str | None) -> str:
    for prefix, service in SERVICE_BY_SUBJECT.items():
        if subject is not None and subject.startswith(prefix):
            return service
    return "Continuity"


# Where `continuity up` shares the addresses and keys of the stack it runs; every client
# command reads it for a variable that is not set.
ENV_FILE = Path(".continuity") / "env"
SHARED_VARIABLES = ("NATS_URL", "REDIS_URL", "CONTINUITY_RUNNER_KEYS")


def read_env_file(path: Path = ENV_FILE) -> dict[str, str]:
    """`export NAME=value` lines of `path` (as `write_env_file` writes them); {} if absent."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for word in words:
            name, sep, value = word.partition("=")
            if sep and name in SHARED_VARIABLES:
                values[name] = value
    return values


def write_env_file(path: Path, values: Mapping[str, str]) -> None:
    """A file a shell can source (`. .continuity/env`); only its owner may read it, as it may
    hold runner keys and credentials."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in values.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def setting(name: str) -> str | None:
    """A variable's value: the environment's when set, else `.continuity/env`'s."""
    return os.environ.get(name) or read_env_file().get(name) or None


# What each error code means for the command that got it, and what to do next: one entry for
# every code of the catalogue (shared/contract/errors.py).
def explain(code: str, run_id: str | None, fallback: str, missing: str | None = None) -> str:
    """`missing`: what a `not_found` is about (default: the run)."""
    run = f"run {run_id}" if run_id else "the run"
    missing = missing or run
    messages = {
        errors.NOT_FOUND.code: f"{missing} is not known here (no such record)",
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
        errors.SESSION_NOT_OWNED.code: (
            "another runner owns this session; an operator moves it with `continuity sessions transfer`"
        ),
        errors.CLAIM_REFUSED.code: (
            "runners' claims are refused (CONTINUITY_SESSION_CLAIMS=refuse); ask an operator to transfer it"
        ),
        errors.RUNNER_NOT_ISSUED.code: (
            "that runner is not issued for the session's tenant (or is revoked): "
            "`continuity runners tenants RUNNER --tenant T`, or issue it with `continuity runners add`"
        ),
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
    return str(args.nats_url or setting("NATS_URL") or DEFAULT_NATS_URL)


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
    CONTINUITY_NATS_TLS_* variables, see shared/platform/tls.py)."""
    import nats

    from shared.platform.tls import nats_context_from_env

    tls = nats_context_from_env(url)

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


def runner_id(value: str) -> str:
    """An argparse type: a runner_id as the contract allows it (it is a subject token)."""
    if not _RUNNER_ID.match(value):
        raise argparse.ArgumentTypeError("RUNNER_ID must be 1 to 64 of A-Z a-z 0-9 _ -")
    return value


def default_actor() -> str:
    """Who an operator command records when --actor is not given: the login name when it is a
    valid token, else `operator`."""
    import getpass

    try:
        name = getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry)
        return "operator"
    return name if _TOKEN.match(name) else "operator"


def actor_of(args: argparse.Namespace) -> str:
    return str(args.actor) if args.actor else default_actor()


def actor_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--actor",
        type=token("--actor"),
        default=None,
        help="who does it, recorded in the audit (default: your login name)",
    )


def number(
    kind: Callable[[str], float], low: float, high: float | None = None, *, above: bool = False
) -> Callable[[str], Any]:
    """An argparse type: a finite `kind` (int or float) from `low` (or above it) to `high`."""

    def check(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < low or (above and value == low) or (high is not None and value > high):
            bound = f"more than {low:g}" if above else f"at least {low:g}"
            bound += f" and at most {high:g}" if high is not None else ""
            raise argparse.ArgumentTypeError(f"must be {bound}, not {text}")
        return value

    return check


TABLE_WIDTH = 100
"""The width of the demo's report, which is read in a terminal of any size."""
ELLIPSIS = "\u2026"


def output_width(stream: TextIO | None = None) -> int | None:
    """The columns a table printed on `stream` (default stdout) may take: COLUMNS when set,
    else the terminal's width; None (cut nothing) when the output goes to a pipe or a file,
    where a reader or a script wants every cell whole."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stdout if stream is None else stream
    try:
        if not stream.isatty():
            return None
        return os.get_terminal_size(stream.fileno()).columns or None
    except (AttributeError, ValueError, OSError):  # no descriptor (a captured stream), or closed
        return None


def clip(text: str, width: int) -> str:
    """`text` in at most `width` columns, its end replaced by an ellipsis when cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + ELLIPSIS


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int | None = None,
    whole: Sequence[int] = (),
) -> str:
    """Aligned columns in at most `width` columns (default: `output_width()`, and no limit when
    that is None): the widest columns are cut first, each cell with an ellipsis, so that no
    line wraps in the middle of a column. A column keeps at least 16 characters (a code like
    `operator_resolve` stays whole); the first column, which names the row (a run id to copy),
    and the columns in `whole` (closed codes) are never cut: past those the line is wider
    instead."""
    if width is None:
        width = output_width()
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    floor = [min(w, max(len(h), 16)) for w, h in zip(widths, headers, strict=True)]
    for i in (0, *whole):
        floor[i] = widths[i]
    while width is not None and sum(widths) + 2 * (len(widths) - 1) > width:
        i = max(range(len(widths)), key=lambda k: widths[k] - floor[k])
        if widths[i] <= floor[i]:
            break  # every column is at its narrowest: a wider line beats unreadable cells
        widths[i] -= 1

    def line(cells: Sequence[str]) -> str:
        return "  ".join(clip(c, w).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


class Parser(argparse.ArgumentParser):
    """Argument errors as the rest of a command's errors: exit code 2, and under `--json` a
    JSON error on stdout instead of the usage text."""

    wants_json = False

    def error(self, message: str) -> NoReturn:
        if Parser.wants_json:
            text = _PRINTABLE.sub("?", f"{self.prog}: {message}")
            print(to_json({"error": {"code": "invalid_argument", "message": text}}))
            print(f"continuity: error: {text} [invalid_argument]", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        super().error(message)


_PRINTABLE = re.compile(r"[^\x20-\x7e]")


def connection_parent() -> argparse.ArgumentParser:
    """The options every client command takes (use as `parents=[...]`)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--nats-url",
        default=None,
        help=f"NATS URL (default: $NATS_URL, else {ENV_FILE}'s, else {DEFAULT_NATS_URL})",
    )
    common.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of tables")
    common.add_argument(
        "--timeout",
        type=number(float, 0, 3600, above=True),
        default=5.0,
        help="seconds to wait for an answer (more than 0, at most 3600; default 5)",
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
