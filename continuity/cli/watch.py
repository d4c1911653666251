"""`continuity watch`: decisions as they are published, a line each (or JSON lines).

It reads CONTINUITY_DECISIONS through an ephemeral ordered consumer of its own (in memory, no
acknowledgements), so it changes nothing for the runners and the services, and starts now or
`--since` a while ago. It runs until interrupted, or until `--count` decisions were shown.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from datetime import UTC, datetime, timedelta

import msgspec
from nats.js.api import ConsumerConfig, DeliverPolicy

from continuity.cli import run_filters
from continuity.cli.arguments import connection_parent
from continuity.cli.connect import connected
from continuity.cli.examples import examples
from continuity.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNAVAILABLE, Failure
from continuity.cli.output import report
from continuity.cli.refusals import Refusals
from shared.contract import subjects
from shared.contract.decisions import Decision
from shared.contract.tenancy import is_refusal
from shared.records.decisions import STATUS_BY_ACTION

_decision = msgspec.json.Decoder(Decision)
_COLUMNS = (("DECIDED AT", 24), ("RUNNER", 16), ("RUN ID", 24), ("ATTEMPT", 7), ("ACTION", 18))
_HEADERS = ("STATUS", "REASON", "TENANT", "ROW")


def line(d: Decision) -> str:
    cells = [d.decided_at, d.runner_id, d.run_id, str(d.attempt), d.action]
    fixed = "  ".join(c.ljust(w) for c, (_, w) in zip(cells, _COLUMNS, strict=True))
    status = STATUS_BY_ACTION[d.action].ljust(11)
    return f"{fixed}  {status}  {d.reason}  {d.session.tenant}  {d.rule or '-'}"


def header() -> str:
    fixed = "  ".join(h.ljust(w) for h, w in _COLUMNS)
    return f"{fixed}  {_HEADERS[0].ljust(11)}  {_HEADERS[1]}  {_HEADERS[2]}  {_HEADERS[3]}"


async def watch(args: argparse.Namespace) -> None:
    refusals = Refusals()
    nc = await connected(args, refusals)
    try:
        js = nc.jetstream(timeout=args.timeout)
        config = ConsumerConfig(inactive_threshold=60.0)
        if args.since is not None:
            config.deliver_policy = DeliverPolicy.BY_START_TIME
            config.opt_start_time = datetime.now(UTC) - args.since
        else:
            config.deliver_policy = DeliverPolicy.NEW
        subject = subjects.decisions(args.runner) if args.runner else subjects.DECISIONS_ALL
        try:
            sub = await refusals.race(
                js.subscribe(subject, stream=subjects.DECISIONS_STREAM, ordered_consumer=True, config=config)
            )
        except Failure:
            raise
        except Exception as exc:
            raise Failure(
                EXIT_UNAVAILABLE,
                "unavailable",
                f"cannot read {subjects.DECISIONS_STREAM} ({type(exc).__name__}); is JetStream up?",
            ) from None
        print(f"Watching {subjects.DECISIONS_STREAM} (Ctrl-C stops).", file=sys.stderr, flush=True)
        if not args.json:
            print(header(), flush=True)
        shown = 0
        while args.count is None or shown < args.count:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except TimeoutError:
                if refusals.denial is not None:
                    raise refusals.permission_failure() from None
                if nc.is_closed:
                    raise Failure(EXIT_UNAVAILABLE, "unavailable", "the NATS connection closed") from None
                continue
            if is_refusal(msg.data):
                continue  # a refused event's notice to its runner, not a decision (contract 10.5)
            try:
                decision = _decision.decode(msg.data)
            except msgspec.MsgspecError:
                seq = msg.metadata.sequence.stream if msg.reply else "?"
                print(
                    f"continuity: skipped a message that is not a decision (sequence {seq})", file=sys.stderr
                )
                continue
            if not run_filters.decision_matches(decision, args):
                continue
            print(msgspec.json.encode(decision).decode() if args.json else line(decision), flush=True)
            shown += 1
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 2)


def _cmd_watch(args: argparse.Namespace) -> int:
    if args.count is not None and args.count < 1:
        return report(args, Failure(EXIT_BAD_INPUT, "invalid_argument", "--count must be at least 1"))
    try:
        asyncio.run(watch(args))
    except Failure as failure:
        return report(args, failure)
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _since(value: str) -> timedelta:
    return run_filters.duration(value)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "watch",
        parents=[connection_parent()],
        help="show decisions as they are made, a line each (--json: JSON lines)",
    )
    p.add_argument("--since", type=_since, default=None, help="start this long ago (5m, 2h) instead of now")
    run_filters.add_filters(p, ages=False, status_default=None)
    p.add_argument("--count", type=int, default=None, help="stop after this many decisions")
    p.set_defaults(func=_cmd_watch)
    examples(p, "continuity watch", "continuity watch --since 5m --status operator --json")
