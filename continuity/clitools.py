"""What every client command shares: connecting, printing, and exit codes from error replies."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import nats
from nats.aio.client import Client

from shared.client import ContinuityClient, RequestError

T = TypeVar("T")

EXIT_OK = 0
EXIT_CONFLICT = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_UNAVAILABLE = 4

EXIT_BY_STATUS = {400: EXIT_BAD_INPUT, 404: EXIT_NOT_FOUND, 409: EXIT_CONFLICT, 503: EXIT_UNAVAILABLE}


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--nats-url",
        default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"),
        help="NATS server (default: $NATS_URL or nats://127.0.0.1:4222)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument("--timeout", type=float, default=5.0, help="request timeout in seconds")


def run_client(args: argparse.Namespace, body: Callable[[ContinuityClient], Awaitable[int]]) -> int:
    """Connect, run `body`, map failures to documented exit codes and one-line messages."""

    async def main() -> int:
        try:
            nc: Client = await nats.connect(
                args.nats_url, connect_timeout=args.timeout, max_reconnect_attempts=0, allow_reconnect=False
            )
        except Exception as exc:
            print(f"error: cannot connect to NATS at {args.nats_url} ({type(exc).__name__})", file=sys.stderr)
            return EXIT_UNAVAILABLE
        try:
            return await body(ContinuityClient(nc, timeout=args.timeout))
        except RequestError as err:
            print(f"error: {err.code}: {err.message}", file=sys.stderr)
            return EXIT_BY_STATUS.get(err.status, EXIT_UNAVAILABLE)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            print(f"error: no answer from Continuity ({type(exc).__name__}); is it running?", file=sys.stderr)
            return EXIT_UNAVAILABLE
        finally:
            await nc.close()

    return asyncio.run(main())


def emit(args: argparse.Namespace, value: Any, human: Callable[[Any], str]) -> None:
    if args.json:
        print(msgspec.json.encode(value).decode())
    else:
        print(human(value))


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def fields(value: msgspec.Struct) -> str:
    """A record as `name  value` lines."""
    builtins = msgspec.to_builtins(value)
    width = max(len(k) for k in builtins)
    return "\n".join(f"{k.ljust(width)}  {_show(v)}" for k, v in builtins.items())


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return msgspec.json.encode(value).decode()
    return str(value)
