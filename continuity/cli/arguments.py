"""Argument checks made before anything is sent, the options every client command shares, and
a parser whose errors are a command's errors."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from continuity.cli.connect import DEFAULT_NATS_URL
from continuity.cli.envfile import ENV_FILE
from continuity.cli.exits import EXIT_BAD_INPUT
from continuity.cli.output import to_json
from shared.contract.limits import CURSOR_CHARS
from shared.contract.types import RUNNER_ID_PATTERN, TOKEN_PATTERN

_TOKEN = re.compile(TOKEN_PATTERN)
_RUNNER_ID = re.compile(RUNNER_ID_PATTERN)
_PRINTABLE = re.compile(r"[^\x20-\x7e]")


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


def page_limit(value: str) -> int:
    """An argparse type: how many records a list shows, 1 to 1000."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number") from None
    if not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError("must be between 1 and 1000")
    return n


def page_cursor(value: str) -> str:
    """An argparse type: the cursor a list printed after its page."""
    if not value or len(value) > CURSOR_CHARS:
        raise argparse.ArgumentTypeError(f"must be 1 to {CURSOR_CHARS} characters")
    return value


def add_page_options(parser: argparse.ArgumentParser) -> None:
    """`--limit` and `--cursor` of a command that lists a page at a time."""
    parser.add_argument(
        "--limit", type=page_limit, default=100, help="at most this many (1 to 1000, default 100)"
    )
    parser.add_argument(
        "--cursor",
        type=page_cursor,
        default=None,
        help="show the one page after this cursor (printed after a list that has more)",
    )
