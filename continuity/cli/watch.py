"""`continuity watch`: decisions as they are published, a line each (or JSON lines).

It reads CONTINUITY_DECISIONS by sequence, as the console's live view does, and creates no
consumer, so it changes nothing for the runners and the services; it starts now or `--since` a
while ago. It runs until interrupted, or until `--count` decisions were shown.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

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
from shared.platform.bus import reading
from shared.records.decisions import STATUS_BY_ACTION

POLL_S = 0.5
"""How often the stream is looked at for new decisions. The command reads by sequence because
the operator's NATS user may create no consumer (a consumer create request may name any deliver
subject, which the server does not check against the creator's permissions), and a reader
without a consumer is told of no new message: it asks. Each look is one stream-info request;
twice a second shows a decision within half a second of its being stored."""

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


class _Watch:
    """Where the command is in the stream, and what it printed: each matching decision as it is
    read, up to `--count`."""

    def __init__(self, js: Any, args: argparse.Namespace) -> None:
        self.js = js
        self.args = args
        self.subject = subjects.decisions(args.runner) if args.runner else subjects.DECISIONS_ALL
        self.next_seq = 0
        """The sequence of the next message to read."""
        self.shown = 0

    @property
    def done(self) -> bool:
        return self.args.count is not None and self.shown >= self.args.count

    async def start(self) -> None:
        """From the next message stored, or from the first stored `--since` ago."""
        now = await reading.bounds(self.js, subjects.DECISIONS_STREAM)
        if self.args.since is None:
            self.next_seq = now.last + 1
        else:
            since = datetime.now(UTC) - self.args.since
            self.next_seq = await reading.first_since(
                self.js, subjects.DECISIONS_STREAM, self.subject, since, now
            )

    async def read_new(self) -> None:
        """Show what was stored from `next_seq` on, up to `--count`."""
        now = await reading.bounds(self.js, subjects.DECISIONS_STREAM)
        if now.last + 1 < self.next_seq:  # the stream was made again: its sequences start over
            self.next_seq = now.first
        first = max(self.next_seq, now.first)
        async for raw in reading.forward(self.js, subjects.DECISIONS_STREAM, self.subject, first, now.last):
            seq = raw.seq or first
            self.next_seq = seq + 1
            self._show(seq, raw.data or b"")
            if self.done:
                return
        self.next_seq = max(self.next_seq, now.last + 1)

    def _show(self, seq: int, data: bytes) -> None:
        if is_refusal(data):
            return  # a refused event's notice to its runner, not a decision (contract 10.5)
        try:
            decision = _decision.decode(data)
        except msgspec.MsgspecError:
            print(f"continuity: skipped a message that is not a decision (sequence {seq})", file=sys.stderr)
            return
        if not run_filters.decision_matches(decision, self.args):
            return
        print(msgspec.json.encode(decision).decode() if self.args.json else line(decision), flush=True)
        self.shown += 1


async def watch(args: argparse.Namespace) -> None:
    refusals = Refusals()
    nc = await connected(args, refusals)
    try:
        watching = _Watch(nc.jetstream(timeout=args.timeout), args)
        try:
            await refusals.race(watching.start())
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
        while not watching.done:
            try:
                await refusals.race(watching.read_new())
            except Failure:
                raise
            except Exception:  # NATS away for a moment: the next look goes on from where this one stopped
                if nc.is_closed:
                    raise Failure(EXIT_UNAVAILABLE, "unavailable", "the NATS connection closed") from None
            if not watching.done:
                await asyncio.sleep(POLL_S)  # the pace of the looks (POLL_S), not a wait for an event
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
