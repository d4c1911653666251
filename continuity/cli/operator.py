"""Operator commands: `continuity reconciliations ...` and `continuity runs ...`.

Readable tables by default, `--json` for scripts. Exit codes (docs/operator.md):
0 done, 1 conflict (409), 2 bad input (400 or a rejected argument), 3 not found (404),
4 unavailable (NATS unreachable, no service answering, a timeout, 503), 5 internal error (500).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from continuity.cli import run_filters
from continuity.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_CONFLICT,
    EXIT_OK,
    Failure,
    connection_parent,
    execute,
    report,
    session,
    table,
    to_json,
    token,
)
from shared.contract import (
    AuditReply,
    ListRequest,
    ReconciliationRecord,
    ResolveRequest,
    RetryRequest,
    RunEntry,
    RunsListReply,
    RunView,
)
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.limits import CURSOR_CHARS, EVIDENCE_CHARS

EVIDENCE_MAX = EVIDENCE_CHARS
BULK_RETRY_DEFAULT_MAX = 10
"""A bulk retry of more matching runs than this needs an explicit `--max`."""


def _limit(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number") from None
    if not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError("must be between 1 and 1000")
    return n


def _cursor(value: str) -> str:
    if not value or len(value) > CURSOR_CHARS:
        raise argparse.ArgumentTypeError(f"must be 1 to {CURSOR_CHARS} characters")
    return value


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


def _age(rfc3339: str) -> str:
    try:
        seconds = int((datetime.now(UTC) - datetime.fromisoformat(rfc3339)).total_seconds())
    except ValueError:
        return "-"
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _session_text(run: RunView | ReconciliationRecord | RunEntry) -> str:
    s = run.session
    return f"{s.tenant}/{s.conversation_id}/{s.agent_id}"


def _fields(pairs: Sequence[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in pairs)


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
            _age(r.opened_at) if r.status == "open" else "-",
        ]
        for r in items
    ]
    headers = ["RUN ID", "RUNNER", "ATTEMPT", "TOOL", "RECORDED", "STATUS", "OUTCOME", "OPENED AT", "WAITING"]
    return table(headers, rows) + more


def render_record(r: ReconciliationRecord) -> str:
    pairs = [
        ("Run", r.run_id),
        ("Runner", r.runner_id),
        ("Session", _session_text(r)),
        ("Attempt", str(r.attempt)),
        ("Status", r.status),
        ("Opened at", f"{r.opened_at} ({_age(r.opened_at)} ago)"),
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
    text = _fields(pairs)
    if r.status == "open":
        text += (
            f"\n\nNext: check whether the tool call took effect, then\n"
            f"  continuity reconciliations resolve {r.run_id} "
            f"--outcome completed|not_performed|mixed --evidence TEXT --actor NAME"
        )
    return text


def render_delivered(reply: Any, what: str) -> str:
    return (
        f"{what}. Delivered continue_fresh (decision {reply.decision_id}): the runner starts a "
        f"fresh provider session in the same workspace; the saved session stays held."
    )


def render_run(result: tuple[RunView, AuditReply]) -> str:
    run, audit = result
    pairs = [
        ("Run", run.run_id),
        ("Runner", run.runner_id),
        ("Session", _session_text(run)),
        ("Attempt", str(run.attempt)),
        ("Status", run.status),
    ]
    d = run.last_decision
    if d is not None:
        pairs.append(("Last decision", f"{d.action} ({d.reason}) at {d.decided_at}"))
        if d.reconciled_outcome:
            pairs.append(("Reconciled outcome", d.reconciled_outcome))
        if d.detail:
            pairs.append(("Detail", d.detail))
    text = _fields(pairs)
    hint = {
        "operator": f"Next: continuity runs retry {run.run_id} --actor NAME",
        "reconciling": f"Next: continuity reconciliations show {run.run_id}",
    }.get(run.status)
    if hint:
        text += f"\n{hint}"
    rows = [
        [
            e.at,
            e.kind,
            e.actor,
            str(e.attempt),
            e.action or "-",
            e.reason or "-",
            e.outcome or "-",
        ]
        for e in audit.items
    ]
    text += "\n\nAudit trail\n"
    text += (
        table(["AT", "KIND", "ACTOR", "ATTEMPT", "ACTION", "REASON", "OUTCOME"], rows) if rows else "(empty)"
    )
    return text


def _runs_rows(items: Sequence[RunEntry]) -> str:
    rows = [
        [
            r.run_id,
            r.runner_id,
            _session_text(r),
            str(r.attempt),
            r.status,
            r.reason,
            r.updated_at,
            _age(r.updated_at),
        ]
        for r in items
    ]
    return table(["RUN ID", "RUNNER", "SESSION", "ATTEMPT", "STATUS", "REASON", "UPDATED AT", "AGE"], rows)


def render_runs(reply: RunsListReply) -> str:
    more = f"\nMore after these: --cursor {reply.next_cursor}" if reply.next_cursor else ""
    if not reply.items:
        return "No runs match." + more
    return _runs_rows(reply.items) + more


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


async def _run_and_audit(c: ContinuityClient, run_id: str) -> tuple[RunView, AuditReply]:
    run = await c.run(run_id)
    audit = await c.audit(run_id)
    return run, audit


def _cmd_run_show(args: argparse.Namespace) -> int:
    return execute(
        args,
        lambda c: _run_and_audit(c, args.run_id),
        render_run,
        lambda result: {"run": result[0], "audit": result[1].items},
    )


def _cmd_runs_list(args: argparse.Namespace) -> int:
    """Without `--cursor`, page after page up to `--limit` runs; with it, that one page."""
    req = run_filters.list_request(args, args.limit, args.cursor)
    return execute(
        args,
        lambda c: c.runs(req) if args.cursor is not None else c.runs_upto(req),
        render_runs,
    )


def _cmd_run_retry(args: argparse.Namespace) -> int:
    if args.run_id is None:
        return _bulk_retry(args)
    if run_filters.has_filters(args) or args.dry_run or args.max is not None or args.status is not None:
        return report(
            args,
            Failure(EXIT_BAD_INPUT, "invalid_argument", "give either RUN_ID or filters, not both"),
        )
    req = RetryRequest(run_id=args.run_id, actor=args.actor)
    return execute(
        args,
        lambda c: c.retry(req),
        lambda reply: render_delivered(reply, f"Retried run {args.run_id}"),
    )


def _bulk_retry(args: argparse.Namespace) -> int:
    """Find the runs, show them (`--dry-run` stops here), confirm, retry each, count outcomes."""
    if args.status is None:
        args.status = "operator"
    bound = args.max if args.max is not None else BULK_RETRY_DEFAULT_MAX
    try:
        found: RunsListReply = asyncio.run(
            session(args, lambda c: c.runs_upto(run_filters.list_request(args, min(bound + 1, 1000))))
        )
        runs = found.items
        if len(runs) > bound:
            hint = "raise --max" if args.max is not None else f"pass --max N (more than {bound})"
            raise Failure(
                EXIT_BAD_INPUT,
                "too_many_runs",
                f"more than {bound} runs match; narrow the filters or {hint}; nothing was retried",
            )
        if args.dry_run:
            if args.json:
                print(to_json({"dry_run": True, "matched": len(runs), "items": runs}))
            elif runs:
                print(f"Would retry {len(runs)} run(s):\n{_runs_rows(runs)}")
            else:
                print("No runs match: nothing would be retried.")
            return EXIT_OK
        if not runs:
            print(
                to_json({"matched": 0, "retried": 0, "refused": {}, "items": []})
                if args.json
                else "No runs match."
            )
            return EXIT_OK
        if not args.yes:
            print(_runs_rows(runs), file=sys.stderr)
            print(
                f"Retry these {len(runs)} run(s) as {args.actor}? [y/N] ", end="", file=sys.stderr, flush=True
            )
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                raise Failure(EXIT_BAD_INPUT, "not_confirmed", "not confirmed; nothing was retried")
        results = asyncio.run(session(args, lambda c: _retry_each(c, runs, args.actor)))
    except Failure as failure:
        return report(args, failure)
    refused = Counter(code for _, code, _ in results if code != "retried")
    if args.json:
        items = [
            {"run_id": run_id, "result": code, **({"decision_id": detail} if code == "retried" else {})}
            for run_id, code, detail in results
        ]
        print(
            to_json(
                {
                    "matched": len(runs),
                    "retried": len(results) - sum(refused.values()),
                    "refused": dict(refused),
                    "items": items,
                }
            )
        )
    else:
        rows = [[run_id, code, detail] for run_id, code, detail in results]
        print(table(["RUN ID", "RESULT", "DETAIL"], rows))
        summary = ", ".join(f"{code}: {n}" for code, n in sorted(refused.items()))
        print(
            f"Retried {len(results) - sum(refused.values())} of {len(runs)}; refused {sum(refused.values())}"
            + (f" ({summary})" if summary else "")
        )
    return EXIT_CONFLICT if refused else EXIT_OK


async def _retry_each(
    c: ContinuityClient, runs: Sequence[RunEntry], actor: str
) -> list[tuple[str, str, str]]:
    """(run_id, 'retried' or the refusal's code, the decision id or the refusal's message)."""
    results: list[tuple[str, str, str]] = []
    for run in runs:
        try:
            reply = await c.retry(RetryRequest(run_id=run.run_id, actor=actor))
        except RequestError as err:  # counted by code; the other runs are still tried
            results.append((run.run_id, err.code, err.message))
        except TimeoutError:
            results.append((run.run_id, "timeout", "no answer in time; show the run before trying again"))
        else:
            results.append((run.run_id, "retried", reply.decision_id))
    return results


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = connection_parent()
    run_id = token("RUN_ID")

    rec = sub.add_parser("reconciliations", help="runs stopped on a tool call with no recorded result")
    rsub = rec.add_subparsers(dest="reconciliations_command", required=True, metavar="COMMAND")

    p = rsub.add_parser("list", parents=[common], help="list reconciliations, oldest first")
    p.add_argument("--status", choices=["open", "delivered", "all"], default="open", help="default: open")
    p.add_argument("--limit", type=_limit, default=100, help="at most this many (1 to 1000, default 100)")
    p.add_argument(
        "--cursor",
        type=_cursor,
        default=None,
        help="show the one page after this cursor (printed after a list that has more)",
    )
    p.set_defaults(func=_cmd_list)

    p = rsub.add_parser("show", parents=[common], help="show one run's reconciliation record")
    p.add_argument("run_id", metavar="RUN_ID", type=run_id)
    p.set_defaults(func=_cmd_show)

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

    runs = sub.add_parser("runs", help="runs and their audit trail; retry a run stopped for an operator")
    usub = runs.add_subparsers(dest="runs_command", required=True, metavar="COMMAND")

    p = usub.add_parser("show", parents=[common], help="show a run, its last decision and its audit trail")
    p.add_argument("run_id", metavar="RUN_ID", type=run_id)
    p.set_defaults(func=_cmd_run_show)

    p = usub.add_parser(
        "list", parents=[common], help="find runs by status, runner, tenant, reason and age, oldest first"
    )
    run_filters.add_filters(p, ages=True, status_default=None)
    p.add_argument("--limit", type=_limit, default=100, help="at most this many (1 to 1000, default 100)")
    p.add_argument(
        "--cursor",
        type=_cursor,
        default=None,
        help="show the one page after this cursor (printed after a list that has more)",
    )
    p.set_defaults(func=_cmd_runs_list)

    p = usub.add_parser(
        "retry",
        parents=[common],
        help="continue a run stopped with `operator` in a fresh session; without RUN_ID, the runs "
        "the filters match (status operator unless --status says otherwise)",
    )
    p.add_argument("run_id", metavar="RUN_ID", type=run_id, nargs="?", default=None)
    p.add_argument("--actor", required=True, type=token("--actor"), help="who decides (recorded)")
    run_filters.add_filters(p, ages=True, status_default=None)
    p.add_argument("--dry-run", action="store_true", help="list what would be retried, retry nothing")
    p.add_argument(
        "--max",
        type=_limit,
        default=None,
        help=f"retry at most this many (1 to 1000); needed when more than {BULK_RETRY_DEFAULT_MAX} match",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_cmd_run_retry)
