"""`continuity reconciliations list|show|resolve`: runs stopped on a tool call with no recorded
result, and the operator's record of what it did.

Readable tables by default, `--json` for scripts. Exit codes (docs/operator.md):
0 done, 1 conflict (409), 2 bad input (400 or a rejected argument), 3 not found (404),
4 unavailable (NATS unreachable, no service answering, a timeout, 503), 5 internal error (500).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from continuity.cli.arguments import add_page_options, connection_parent, token
from continuity.cli.connect import execute
from continuity.cli.examples import examples
from continuity.cli.exits import EXIT_BAD_INPUT, Failure
from continuity.cli.output import aligned, report
from continuity.cli.run_text import render_delivered, session_text
from continuity.cli.tables import table
from shared.contract import ListRequest, ReconciliationRecord, ResolveRequest
from shared.contract.limits import EVIDENCE_CHARS
from shared.platform.text import age

EVIDENCE_MAX = EVIDENCE_CHARS


def _evidence(args: argparse.Namespace) -> str:
    if args.evidence_file is not None:
        try:
            if args.evidence_file == "-":
                text = sys.stdin.read()
            else:
                with open(args.evidence_file, encoding="utf-8") as f:
                    text = f.read()
        except OSError as err:
            raise Failure(
                EXIT_BAD_INPUT, "invalid_argument", f"cannot read the evidence file: {err.strerror}"
            ) from None
        except UnicodeDecodeError:
            raise Failure(EXIT_BAD_INPUT, "invalid_argument", "the evidence file is not UTF-8 text") from None
        text = text.strip()
    else:
        text = args.evidence
    if not text:
        raise Failure(
            EXIT_BAD_INPUT, "invalid_argument", "evidence is empty: say how the outcome was checked"
        )
    if len(text) > EVIDENCE_MAX:
        raise Failure(
            EXIT_BAD_INPUT, "invalid_argument", f"evidence is {len(text)} characters; at most {EVIDENCE_MAX}"
        )
    return str(text)


# Rendering for people --------------------------------------------------------------------


def render_list(reply: Any, status: str | None) -> str:
    items: list[ReconciliationRecord] = reply.items
    # The same command with `--cursor` shows what follows.
    more = f"\nMore after these: --cursor {reply.next_cursor}" if reply.next_cursor else ""
    if not items:
        return f"No {status or ''} reconciliations.".replace("  ", " ") + more
    rows = [
        [
            r.run_id,
            r.runner_id,
            str(r.attempt),
            r.tool_call.tool_name if r.tool_call else "-",
            r.recorded_outcome or "-",
            r.status,
            r.resolution.action_outcome if r.resolution else "-",
            r.opened_at,
            age(r.opened_at) if r.status == "open" else "-",
        ]
        for r in items
    ]
    headers = ["RUN ID", "RUNNER", "ATTEMPT", "TOOL", "RECORDED", "STATUS", "OUTCOME", "OPENED AT", "WAITING"]
    return table(headers, rows) + more


def render_record(r: ReconciliationRecord) -> str:
    pairs = [
        ("Run", r.run_id),
        ("Runner", r.runner_id),
        ("Session", session_text(r)),
        ("Attempt", str(r.attempt)),
        ("Status", r.status),
        ("Opened at", f"{r.opened_at} ({age(r.opened_at)} ago)"),
    ]
    if r.tool_call is not None:
        pairs += [
            ("Tool call", f"{r.tool_call.tool_name} ({r.tool_call.tool_call_id})"),
            ("Started at", r.tool_call.started_at),
        ]
    else:
        pairs.append(("Tool call", "- (the runner reported a pending side effect without details)"))
    pairs.append(("Runner's outcome", r.recorded_outcome or "unknown"))
    if r.resolution is not None:
        pairs += [
            ("Resolved outcome", r.resolution.action_outcome),
            ("Resolved by", r.resolution.actor),
            ("Resolved at", r.resolution.resolved_at),
            ("Evidence", r.resolution.evidence),
        ]
    text = aligned(pairs)
    if r.status == "open":
        text += (
            f"\n\nNext: check whether the tool call took effect, then\n"
            f"  continuity reconciliations resolve {r.run_id} "
            f"--outcome completed|not_performed|mixed --evidence TEXT --actor NAME"
        )
    return text


# Commands --------------------------------------------------------------------------------


def _cmd_list(args: argparse.Namespace) -> int:
    """Without `--cursor`, page after page up to `--limit` records; with it, that one page."""
    status = None if args.status == "all" else args.status
    req = ListRequest(status=status, limit=args.limit, cursor=args.cursor)
    return execute(
        args,
        lambda c: c.reconciliations(req) if args.cursor is not None else c.reconciliations_upto(req),
        lambda reply: render_list(reply, status),
    )


def _cmd_show(args: argparse.Namespace) -> int:
    return execute(args, lambda c: c.reconciliation(args.run_id), render_record)


def _cmd_resolve(args: argparse.Namespace) -> int:
    try:
        evidence = _evidence(args)
    except Failure as failure:
        return report(args, failure)
    req = ResolveRequest(run_id=args.run_id, action_outcome=args.outcome, evidence=evidence, actor=args.actor)
    return execute(
        args,
        lambda c: c.resolve(req),
        lambda reply: render_delivered(reply, f"Resolved run {args.run_id} as {args.outcome}"),
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = connection_parent()
    run_id = token("RUN_ID")

    rec = sub.add_parser("reconciliations", help="runs stopped on a tool call with no recorded result")
    rsub = rec.add_subparsers(dest="reconciliations_command", required=True, metavar="COMMAND")
    examples(rec, "continuity reconciliations list", "continuity reconciliations show run-7f3a")

    p = rsub.add_parser("list", parents=[common], help="list reconciliations, oldest first")
    p.add_argument("--status", choices=["open", "delivered", "all"], default="open", help="default: open")
    add_page_options(p)
    p.set_defaults(func=_cmd_list)
    examples(
        p,
        "continuity reconciliations list",
        "continuity reconciliations list --status all --limit 20 --json",
    )

    p = rsub.add_parser("show", parents=[common], help="show one run's reconciliation record")
    p.add_argument("run_id", metavar="RUN_ID", type=run_id)
    p.set_defaults(func=_cmd_show)
    examples(p, "continuity reconciliations show run-7f3a")

    p = rsub.add_parser(
        "resolve",
        parents=[common],
        help="record what the pending tool call did, and continue the run in a fresh session",
    )
    p.add_argument("run_id", metavar="RUN_ID", type=run_id)
    p.add_argument("--outcome", required=True, choices=["completed", "not_performed", "mixed"])
    evidence = p.add_mutually_exclusive_group(required=True)
    evidence.add_argument(
        "--evidence", help=f"how the outcome was checked (at most {EVIDENCE_MAX} characters)"
    )
    evidence.add_argument(
        "--evidence-file", metavar="PATH", help="read the evidence from a file, - for stdin"
    )
    p.add_argument("--actor", required=True, type=token("--actor"), help="who decides (recorded)")
    p.set_defaults(func=_cmd_resolve)
    examples(
        p,
        'continuity reconciliations resolve run-7f3a --outcome completed --evidence "ticket 42 exists" '
        "--actor alice",
        "continuity reconciliations resolve run-7f3a --outcome mixed --evidence-file notes.txt --actor alice",
    )
