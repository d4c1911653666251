"""`continuity history migrate`: moves the finished runs an earlier release left in Redis to
CONTINUITY_HISTORY (contract 9.14), as the reconciliation service moves each run it sees end.

It runs with the reconciliation service's settings and credentials (its environment: NATS_URL,
REDIS_URL, CONTINUITY_NATS_* and CONTINUITY_REDIS_*), since it writes the stream that service
writes and reads Redis as it does: for instance in its pod, `kubectl exec deploy/reconciliation
-- continuity history migrate`. It is safe to run again, and alongside the services: a run is
copied whole, then given the linger only if no step was recorded meanwhile; a run moved already
is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

from continuity.cli.examples import examples
from continuity.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNAVAILABLE
from continuity.cli.output import to_json
from shared.platform import tls
from shared.platform.bus.connection import connect
from shared.platform.config import Config, ConfigError
from shared.platform.redis import Redis
from shared.records.history import FINAL_STATUSES, HistoryMover
from shared.records.session import text

RUN_PATTERN = "continuity:run:*"
CONNECT_TIMEOUT_S = 15.0
_PREFIX = "continuity:run:{"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("history", help="finished runs' history in JetStream (CONTINUITY_HISTORY)")
    actions = p.add_subparsers(dest="action", required=True)
    examples(p, "continuity history migrate --dry-run")
    migrate = actions.add_parser(
        "migrate",
        help="move the finished runs an earlier release kept in Redis to CONTINUITY_HISTORY",
        description="Copies every finished run still held whole in Redis to CONTINUITY_HISTORY, "
        "then gives its Redis records the linger (CONTINUITY_HISTORY_LINGER_S). Run it with the "
        "reconciliation service's environment; safe to run again and alongside the services.",
    )
    migrate.add_argument("--dry-run", action="store_true", help="count what would move; move nothing")
    migrate.add_argument("--json", action="store_true", help="print the counts as JSON")
    migrate.set_defaults(func=_migrate)
    examples(migrate, "continuity history migrate --dry-run", "continuity history migrate --json")


@dataclass
class Counts:
    """What a migration found, by what it did with each run record."""

    runs: int = 0
    moved: int = 0
    already_moved: int = 0
    not_finished: int = 0
    changed: int = 0


def _migrate(args: argparse.Namespace) -> int:
    try:
        config = Config.from_env(os.environ)
    except ConfigError as err:
        print(f"continuity history migrate: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        counts = asyncio.run(migrate(config, dry_run=args.dry_run))
    except (OSError, TimeoutError) as err:
        print(
            f"continuity history migrate: NATS or Redis unavailable ({type(err).__name__})", file=sys.stderr
        )
        return EXIT_UNAVAILABLE
    if args.json:
        print(to_json(counts.__dict__))
    else:
        verb = "would move" if args.dry_run else "moved"
        print(
            f"{counts.runs} run records: {verb} {counts.moved}, already moved {counts.already_moved}, "
            f"not finished {counts.not_finished}, changed meanwhile {counts.changed}"
        )
    return EXIT_OK


def session_key_of(key: bytes, run_id: str) -> str | None:
    """The session key inside a run record's key `continuity:run:{<sk>}:<run_id>`."""
    name = key.decode("utf-8", "replace")
    tail = "}:" + run_id
    if not name.startswith(_PREFIX) or not name.endswith(tail):
        return None
    return name[len(_PREFIX) : -len(tail)]


async def run_records(redis: Redis) -> AsyncIterator[tuple[str, str, str, bool]]:
    """Every run record: (session key, run_id, status, moved already)."""
    async for key in redis.scan(RUN_PATTERN):
        run_id, status, moved = (
            text(v) for v in await redis.hmget(key.decode(), "run_id", "status", "history")
        )
        sk = session_key_of(key, run_id) if run_id else None
        if sk is not None:
            yield sk, run_id, status, moved == "1"


async def migrate(config: Config, *, dry_run: bool = False) -> Counts:
    redis = Redis.from_config(config)
    nc = await asyncio.wait_for(
        connect(
            config.nats_url,
            "continuity-history-migrate",
            nkeys_seed=config.nats_nkey_seed_file,
            user_credentials=config.nats_creds_file,
            inbox_prefix=config.inbox_prefix("reconciliation"),
            tls=tls.nats_context(config),
        ),
        CONNECT_TIMEOUT_S,
    )
    counts = Counts()
    try:
        await redis.connect()
        history = HistoryMover(redis, nc.jetstream(), config)
        async for sk, run_id, status, moved in run_records(redis):
            counts.runs += 1
            if moved:
                counts.already_moved += 1
            elif status not in FINAL_STATUSES:
                counts.not_finished += 1
            elif dry_run:
                counts.moved += 1
            else:
                result = (await history.move(sk, run_id)).code
                counts.moved += result == "moved"
                counts.not_finished += result in ("not_finished", "not_found")
                counts.changed += result == "changed"
    finally:
        await nc.drain()
        await redis.aclose()
    return counts
