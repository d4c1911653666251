"""What a command prints: JSON for scripts, aligned fields for people, and a failure as both."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from continuity.cli.exits import Failure


def to_json(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()


def report(args: argparse.Namespace, failure: Failure) -> int:
    """The failure on stderr, and under `--json` as a JSON error on stdout; its exit code."""
    if getattr(args, "json", False):
        error: dict[str, Any] = {"code": failure.code, "message": failure.message}
        if failure.status is not None:
            error["status"] = failure.status
        print(to_json({"error": error}))
    print(f"continuity: error: {failure.message} [{failure.code}]", file=sys.stderr)
    return failure.exit_code


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


def aligned(pairs: Sequence[tuple[str, str]]) -> str:
    """`name  value` lines, the values aligned."""
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in pairs)
