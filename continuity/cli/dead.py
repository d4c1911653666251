"""`continuity dead list|show|replay`: the dead letters of CONTINUITY_DEAD.

A dead letter is named by its sequence in the stream. Its body is the original's bytes as the
sender sent them (the first 64 KiB): `show` prints them as text when they are printable text,
never interpreted. `replay` publishes a whole (untruncated) dead letter on its original subject
with the original `Nats-Msg-Id` (header `Continuity-Original-Msg-Id`), so the services treat it
as the original; within the stream's duplicate window of the original, JetStream drops it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import sys
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from nats.js.errors import NotFoundError

from continuity.cli import run_filters
from continuity.cli.arguments import connection_parent
from continuity.cli.connect import connected
from continuity.cli.examples import examples
from continuity.cli.exits import EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_OK, EXIT_UNAVAILABLE, Failure
from continuity.cli.output import report, to_json
from continuity.cli.refusals import Refusals
from continuity.cli.tables import table
from shared.contract import subjects
from shared.platform.bus import reading
from shared.platform.bus.publish import (
    DEAD_AT_HEADER,
    DEAD_MSG_ID_HEADER,
    DEAD_REASON_HEADER,
    DEAD_SERVICE_HEADER,
    DEAD_SIZE_HEADER,
    DEAD_SUBJECT_HEADER,
    DEAD_TRUNCATED_HEADER,
)

KINDS = ("invalid", "quarantine", "exhausted", "refused")
REPLAYABLE_PREFIXES = ("continuity.events.", "continuity.work.")
"""Subjects of the streams the services consume: what a replay can hand back to them."""


def printable(value: str) -> str:
    """A header value for a terminal: control characters shown as `?`."""
    return "".join(c if c.isprintable() else "?" for c in value)


def body_text(data: bytes) -> str | None:
    """The body as text when it is UTF-8 made of printable characters (and line breaks, tabs)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if all(c.isprintable() or c in "\n\r\t" for c in text) else None


def summary(seq: int, subject: str, headers: Mapping[str, str]) -> dict[str, Any]:
    return {
        "seq": seq,
        "subject": printable(subject),
        "reason": printable(headers.get(DEAD_REASON_HEADER, "")),
        "original_subject": printable(headers.get(DEAD_SUBJECT_HEADER, "")),
        "service": printable(headers.get(DEAD_SERVICE_HEADER, "")),
        "dead_at": printable(headers.get(DEAD_AT_HEADER, "")),
        "size": printable(headers.get(DEAD_SIZE_HEADER, "")),
        "truncated": headers.get(DEAD_TRUNCATED_HEADER) == "true",
    }


async def _with_js(args: argparse.Namespace, work: Callable[[Any], Awaitable[Any]]) -> Any:
    refusals = Refusals()
    nc = await connected(args, refusals)
    try:
        return await refusals.race(work(nc.jetstream(timeout=args.timeout)))
    except Failure:
        raise
    except NotFoundError:
        raise Failure(
            EXIT_NOT_FOUND, "not_found", "no such dead letter (or no CONTINUITY_DEAD stream)"
        ) from None
    except TimeoutError:
        if refusals.denial is not None:
            raise refusals.permission_failure() from None
        raise Failure(
            EXIT_UNAVAILABLE, "timeout", f"no answer within {args.timeout:g}s; retry later"
        ) from None
    except Exception as exc:
        raise Failure(
            EXIT_UNAVAILABLE, "unavailable", f"JetStream failed the request ({type(exc).__name__})"
        ) from None
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 2)


def _run(args: argparse.Namespace, work: Callable[[Any], Awaitable[Any]]) -> Any:
    return asyncio.run(_with_js(args, work))


# list -------------------------------------------------------------------------------------


async def _list(js: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The latest `--limit` matching dead letters, oldest first: read by sequence from the
    newest back, until `--limit` match or one is older than `--since`. No consumer is created:
    the operator's NATS user may create none (shared/platform/bus/reading.py)."""
    since = datetime.now(UTC) - args.since if args.since is not None else None
    subject = f"continuity.dead.{args.kind}" if args.kind else None
    now = await reading.bounds(js, subjects.DEAD_STREAM)
    kept: list[dict[str, Any]] = []
    async for msg in reading.backward(js, subjects.DEAD_STREAM, now.first, now.last):
        if since is not None and msg.time is not None and msg.time < since:
            break
        if subject is not None and msg.subject != subject:
            continue
        row = summary(msg.seq or 0, msg.subject or "", msg.headers or {})
        if args.reason and row["reason"] != args.reason:
            continue
        if args.service and row["service"] != args.service:
            continue
        if args.original_subject and not row["original_subject"].startswith(args.original_subject):
            continue
        kept.append(row)
        if len(kept) == args.limit:
            break
    return kept[::-1]


def render_list(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No dead letters match."
    cells = [
        [
            str(r["seq"]),
            r["dead_at"],
            r["subject"],
            r["reason"],
            r["original_subject"],
            r["service"],
            r["size"],
            "yes" if r["truncated"] else "no",
        ]
        for r in rows
    ]
    headers = ["SEQ", "DEAD AT", "SUBJECT", "REASON", "ORIGINAL SUBJECT", "SERVICE", "SIZE", "TRUNCATED"]
    return table(headers, cells, whole=(3,))  # the reason is a closed code: never cut


def _cmd_list(args: argparse.Namespace) -> int:
    try:
        rows = _run(args, lambda js: _list(js, args))
    except Failure as failure:
        return report(args, failure)
    print(to_json({"items": rows}) if args.json else render_list(rows))
    return EXIT_OK


# show -------------------------------------------------------------------------------------


async def _get(js: Any, seq: int) -> Any:
    msg = await js.get_msg(subjects.DEAD_STREAM, seq)
    return msg


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        msg = _run(args, lambda js: _get(js, args.seq))
    except Failure as failure:
        return report(args, failure)
    headers: dict[str, str] = dict(msg.headers or {})
    data: bytes = msg.data or b""
    text = body_text(data)
    if args.json:
        print(
            to_json(
                {
                    **summary(args.seq, msg.subject or "", headers),
                    "headers": {printable(k): printable(v) for k, v in headers.items()},
                    "body_bytes": len(data),
                    "body_text": text,
                    "body_base64": base64.b64encode(data).decode(),
                }
            )
        )
        return EXIT_OK
    lines = [f"Dead letter {args.seq} on {printable(msg.subject or '')}", ""]
    width = max((len(k) for k in headers), default=0)
    lines += [f"{printable(k).ljust(width)}  {printable(v)}" for k, v in sorted(headers.items())]
    lines.append("")
    if text is not None:
        lines += [f"Body ({len(data)} bytes, as sent):", text]
    else:
        lines.append(f"Body: {len(data)} bytes, not printable text (--json gives them in base64)")
    print("\n".join(lines))
    return EXIT_OK


# replay -----------------------------------------------------------------------------------


def replay_refusal(headers: Mapping[str, str], data: bytes) -> Failure | None:
    """Why this dead letter cannot be replayed, or None."""
    if headers.get(DEAD_TRUNCATED_HEADER) != "false" or headers.get(DEAD_SIZE_HEADER) != str(len(data)):
        return Failure(
            EXIT_CONFLICT,
            "truncated",
            "this dead letter keeps only the first bytes of the original; it cannot be replayed",
        )
    original = headers.get(DEAD_SUBJECT_HEADER, "")
    if not original.startswith(REPLAYABLE_PREFIXES):
        return Failure(
            EXIT_CONFLICT,
            "not_replayable",
            f"its original subject {printable(original)[:200] or '(none)'} is not one the services consume",
        )
    if not headers.get(DEAD_MSG_ID_HEADER):
        return Failure(
            EXIT_CONFLICT,
            "no_original_msg_id",
            "the dead letter does not record the original's message id, so a replay could not be "
            "de-duplicated; it is not replayed",
        )
    return None


async def _replay(js: Any, seq: int) -> dict[str, Any]:
    msg = await js.get_msg(subjects.DEAD_STREAM, seq)
    headers: dict[str, str] = dict(msg.headers or {})
    data: bytes = msg.data or b""
    refusal = replay_refusal(headers, data)
    if refusal is not None:
        raise refusal
    subject = headers[DEAD_SUBJECT_HEADER]
    msg_id = headers[DEAD_MSG_ID_HEADER]
    ack = await js.publish(subject, data, headers={"Nats-Msg-Id": msg_id})
    window: float | None = None
    with contextlib.suppress(Exception):
        window = (await js.stream_info(ack.stream)).config.duplicate_window
    return {
        "seq": seq,
        "subject": printable(subject),
        "stream": ack.stream,
        "stream_seq": ack.seq,
        "duplicate": bool(ack.duplicate),
        "duplicate_window_s": window,
    }


def _cmd_replay(args: argparse.Namespace) -> int:
    try:
        result = _run(args, lambda js: _replay(js, args.seq))
    except Failure as failure:
        return report(args, failure)
    window = result["duplicate_window_s"]
    window_text = f"{window:g}s" if window is not None else "its duplicate window"
    if result["duplicate"]:
        dropped = Failure(
            EXIT_CONFLICT,
            "duplicate_dropped",
            f"{result['stream']} dropped the replay as a duplicate: the original's message id is "
            f"still within the stream's duplicate window ({window_text}); replay again once it has "
            f"passed",
        )
        if args.json:
            print(to_json({**result, "error": {"code": dropped.code, "message": dropped.message}}))
            print(f"continuity: error: {dropped.message} [{dropped.code}]", file=sys.stderr)
            return dropped.exit_code
        return report(args, dropped)
    if args.json:
        print(to_json(result))
    else:
        print(
            f"Replayed dead letter {args.seq} on {result['subject']} ({result['stream']} sequence "
            f"{result['stream_seq']}), with the original's message id: a replay within "
            f"{window_text} of it would have been dropped as a duplicate."
        )
    return EXIT_OK


def _seq(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("SEQ must be a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError("SEQ must be at least 1")
    return n


def _limit(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number") from None
    if not 1 <= n <= 10000:
        raise argparse.ArgumentTypeError("must be between 1 and 10000")
    return n


def _since(value: str) -> timedelta:
    return run_filters.duration(value)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = connection_parent()
    dead = sub.add_parser("dead", help="dead letters: list, show, replay once the cause is fixed")
    dsub = dead.add_subparsers(dest="dead_command", required=True, metavar="COMMAND")
    examples(dead, "continuity dead list --kind quarantine", "continuity dead show 42")

    p = dsub.add_parser("list", parents=[common], help="the latest dead letters, oldest first")
    p.add_argument("--kind", choices=KINDS, default=None, help="only continuity.dead.<kind>")
    p.add_argument("--reason", default=None, help="only this reason (payload_too_large, unknown_key, ...)")
    p.add_argument("--service", default=None, help="only those of this service")
    p.add_argument("--original-subject", default=None, help="only originals whose subject starts so")
    p.add_argument("--since", type=_since, default=None, help="only those of the last 5m, 2h, 7d")
    p.add_argument("--limit", type=_limit, default=100, help="the latest this many (default 100)")
    p.set_defaults(func=_cmd_list)
    examples(p, "continuity dead list", "continuity dead list --kind quarantine --since 1h --json")

    p = dsub.add_parser("show", parents=[common], help="one dead letter: its headers and its bytes")
    p.add_argument("seq", metavar="SEQ", type=_seq)
    p.set_defaults(func=_cmd_show)
    examples(p, "continuity dead show 42")

    p = dsub.add_parser(
        "replay", parents=[common], help="publish a dead letter again on its original subject, with its id"
    )
    p.add_argument("seq", metavar="SEQ", type=_seq)
    p.set_defaults(func=_cmd_replay)
    examples(p, "continuity dead replay 42       # once the cause is fixed")
