"""`continuity runs show|explain|list|stats|retry`: runs and their audit trail, the policy judged
by outcomes, and the retry of runs stopped for an operator, one or every run some filters match.

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
from datetime import timedelta

from continuity.cli import components, run_filters
from continuity.cli.arguments import add_page_options, connection_parent, page_limit, token
from continuity.cli.connect import execute, session
from continuity.cli.examples import examples
from continuity.cli.exits import EXIT_BAD_INPUT, EXIT_CONFLICT, EXIT_OK, Failure
from continuity.cli.output import aligned, report, to_json
from continuity.cli.run_text import render_delivered, session_text
from continuity.cli.tables import table
from shared.contract import (
    AuditReply,
    GetRequest,
    RetryRequest,
    RunEntry,
    RunsListReply,
    RunsStatsReply,
    RunsStatsRequest,
    RunView,
    SessionView,
)
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.limits import REPLAY_MAX_RUNS
from shared.platform.text import age

BULK_RETRY_DEFAULT_MAX = 10
"""A bulk retry of more matching runs than this needs an explicit `--max`."""


# Rendering for people --------------------------------------------------------------------


def render_run(result: tuple[RunView, AuditReply]) -> str:
    run, audit = result
    pairs = [
        ("Run", run.run_id),
        ("Runner", run.runner_id),
        ("Session", session_text(run)),
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
    text = aligned(pairs)
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
            e.explanation.rule if e.explanation else "-",
            e.outcome or "-",
        ]
        for e in audit.items
    ]
    text += "\n\nAudit trail\n"
    text += (
        table(["AT", "KIND", "ACTOR", "ATTEMPT", "ACTION", "REASON", "ROW", "OUTCOME"], rows)
        if rows
        else "(empty)"
    )
    return text


def render_explanations(audit: AuditReply) -> str:
    """Why each decision of the run was made: the row and the inputs it read."""
    blocks = []
    for e in audit.items:
        why = e.explanation
        if why is None:
            continue
        blocks.append(
            aligned(
                [
                    ("Attempt", str(e.attempt)),
                    ("Decided", f"{e.action} ({e.reason}) at {e.at}"),
                    ("Row", f"{why.rule} of policy {why.policy}"),
                    ("Failure class", f"{why.failure_class} (from {_SOURCES[why.class_source]})"),
                    ("Pending tool call", "yes" if why.pending_tool_call else "no"),
                    ("Attempt of budget", f"{why.attempt} of {why.budget}"),
                    ("Checkpoint policy", why.checkpoint_policy),
                    ("Governed wait elapsed", "yes" if why.governed_wait_elapsed else "no"),
                    ("Tenant budget spent", "yes" if why.budget_spent else "no"),
                ]
            )
        )
    if not blocks:
        return (
            f"Run {audit.run_id} has no explained decision "
            "(an operator's, or one recorded before explanations)."
        )
    return "\n\n".join(blocks)


def render_compatibility(view: SessionView | None) -> str:
    """What the saved session's generation is made of, and which of its components changed when
    it last changed (names only, contract 9.11); '' when its generation has no components."""
    if view is None or view.components is None:
        return ""
    pairs = [("Saved generation made of", components.names(view.components))]
    if view.changed_components:
        pairs.append(("Changed at its last change", components.names(view.changed_components)))
    return aligned(pairs)


def render_explained(result: tuple[AuditReply, SessionView | None]) -> str:
    audit, view = result
    extra = render_compatibility(view)
    return render_explanations(audit) + (f"\n\n{extra}" if extra else "")


_SOURCES = {
    "command_result": "the signed command result",
    "error_code": "the typed error code",
    "none": "no classified field",
}


def _runs_rows(items: Sequence[RunEntry]) -> str:
    rows = [
        [
            r.run_id,
            r.runner_id,
            session_text(r),
            str(r.attempt),
            r.status,
            r.reason,
            r.updated_at,
            age(r.updated_at),
        ]
        for r in items
    ]
    return table(["RUN ID", "RUNNER", "SESSION", "ATTEMPT", "STATUS", "REASON", "UPDATED AT", "AGE"], rows)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def render_stats(reply: RunsStatsReply) -> str:
    """The policy judged by outcomes: run counts by status, then a line per row, class and
    harness (contract 4.6)."""
    statuses = ", ".join(f"{name} {count}" for name, count in reply.statuses.items()) or "none"
    head = f"{reply.runs} run(s) decided since {reply.since}: {statuses}."
    if reply.truncated:
        head += "\nStopped at --max-runs: older matching runs were not read."
    if not reply.rows:
        return head + "\nNo decisions to judge."
    rows = [
        [
            r.rule,
            r.action,
            r.failure_class,
            r.harness if r.harness_version == "unknown" else f"{r.harness} {r.harness_version}",
            str(r.decisions),
            str(r.recovered),
            str(r.failed),
            str(r.abandoned),
            str(r.held),
            str(r.pending),
            _rate(r.success_rate),
            _seconds(r.recovery_p50_s),
            _seconds(r.recovery_p95_s),
            "-" if r.attempts_mean is None else f"{r.attempts_mean:.2f}",
        ]
        for r in reply.rows
    ]
    columns = ["ROW", "ACTION", "CLASS", "HARNESS", "DECISIONS", "RECOVERED", "FAILED", "ABANDONED"]
    columns += ["HELD", "PENDING", "SUCCESS", "TTR P50", "TTR P95", "ATTEMPTS"]
    return head + "\n\n" + table(columns, rows)


def render_runs(reply: RunsListReply) -> str:
    more = f"\nMore after these: --cursor {reply.next_cursor}" if reply.next_cursor else ""
    if not reply.items:
        return "No runs match." + more
    return _runs_rows(reply.items) + more


# Commands --------------------------------------------------------------------------------


async def _run_and_audit(c: ContinuityClient, run_id: str) -> tuple[RunView, AuditReply]:
    run = await c.run(run_id)
    audit = await c.audit(run_id)
    return run, audit


def _cmd_show(args: argparse.Namespace) -> int:
    return execute(
        args,
        lambda c: _run_and_audit(c, args.run_id),
        render_run,
        lambda result: {"run": result[0], "audit": result[1].items},
    )


async def _audit_and_session(c: ContinuityClient, run_id: str) -> tuple[AuditReply, SessionView | None]:
    """The run's audit, and its saved session's record (None when there is none)."""
    audit = await c.audit(run_id)
    try:
        run = await c.run(run_id)
        view = await c.get(GetRequest(session=run.session))
    except RequestError as err:
        if err.code != "not_found":
            raise
        view = None
    return audit, view


def _cmd_explain(args: argparse.Namespace) -> int:
    return execute(
        args,
        lambda c: _audit_and_session(c, args.run_id),
        render_explained,
        lambda result: {
            "run_id": result[0].run_id,
            "items": [e for e in result[0].items if e.explanation is not None],
            "session_components": result[1].components if result[1] else None,
            "changed_components": result[1].changed_components if result[1] else None,
        },
    )


def _cmd_list(args: argparse.Namespace) -> int:
    """Without `--cursor`, page after page up to `--limit` runs; with it, that one page."""
    req = run_filters.list_request(args, args.limit, args.cursor)
    return execute(
        args,
        lambda c: c.runs(req) if args.cursor is not None else c.runs_upto(req),
        render_runs,
    )


def _cmd_stats(args: argparse.Namespace) -> int:
    req = RunsStatsRequest(
        since_s=args.since.total_seconds(),
        runner_id=args.runner,
        tenant=args.tenant,
        max_runs=args.max_runs,
    )
    return execute(args, lambda c: c.runs_stats(req), render_stats)


def _cmd_retry(args: argparse.Namespace) -> int:
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
    try:
        runs = _matching_runs(args)
        if args.dry_run:
            _print_would_retry(args, runs)
            return EXIT_OK
        if not runs:
            print(
                to_json({"matched": 0, "retried": 0, "refused": {}, "items": []})
                if args.json
                else "No runs match."
            )
            return EXIT_OK
        if not args.yes:
            _confirm(args, runs)
        results = asyncio.run(session(args, lambda c: _retry_each(c, runs, args.actor)))
    except Failure as failure:
        return report(args, failure)
    return _print_retried(args, runs, results)


def _matching_runs(args: argparse.Namespace) -> Sequence[RunEntry]:
    """The runs the filters match, refused (nothing retried) when more than the bound match."""
    bound = args.max if args.max is not None else BULK_RETRY_DEFAULT_MAX
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
    return runs


def _print_would_retry(args: argparse.Namespace, runs: Sequence[RunEntry]) -> None:
    if args.json:
        print(to_json({"dry_run": True, "matched": len(runs), "items": runs}))
    elif runs:
        print(f"Would retry {len(runs)} run(s):\n{_runs_rows(runs)}")
    else:
        print("No runs match: nothing would be retried.")


def _confirm(args: argparse.Namespace, runs: Sequence[RunEntry]) -> None:
    """Asked on stderr, so stdout keeps only the outcome."""
    print(_runs_rows(runs), file=sys.stderr)
    print(f"Retry these {len(runs)} run(s) as {args.actor}? [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise Failure(EXIT_BAD_INPUT, "not_confirmed", "not confirmed; nothing was retried")


def _print_retried(
    args: argparse.Namespace, runs: Sequence[RunEntry], results: list[tuple[str, str, str]]
) -> int:
    """Each run's outcome and the counts; a conflict exit when any retry was refused."""
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
    runs = sub.add_parser("runs", help="runs and their audit trail; retry a run stopped for an operator")
    usub = runs.add_subparsers(dest="runs_command", required=True, metavar="COMMAND")
    examples(
        runs,
        "continuity runs list --status operator --older-than 10m",
        "continuity runs show run-7f3a",
        "continuity runs retry run-7f3a --actor alice",
    )
    _register_show(usub, common)
    _register_explain(usub, common)
    _register_list(usub, common)
    _register_stats(usub, common)
    _register_retry(usub, common)


# A run's id as the argument of show, explain and retry.
_RUN_ID = token("RUN_ID")


def _register_show(
    usub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = usub.add_parser("show", parents=[common], help="show a run, its last decision and its audit trail")
    p.add_argument("run_id", metavar="RUN_ID", type=_RUN_ID)
    p.set_defaults(func=_cmd_show)
    examples(p, "continuity runs show run-7f3a", "continuity runs show run-7f3a --json")


def _register_explain(
    usub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = usub.add_parser(
        "explain",
        parents=[common],
        help="why each decision of a run was made: its row and its inputs, and which compatibility "
        "components of its saved session changed at its last new generation",
    )
    p.add_argument("run_id", metavar="RUN_ID", type=_RUN_ID)
    p.set_defaults(func=_cmd_explain)
    examples(p, "continuity runs explain run-7f3a", "continuity runs explain run-7f3a --json")


def _register_list(
    usub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = usub.add_parser(
        "list", parents=[common], help="find runs by status, runner, tenant, reason and age, oldest first"
    )
    run_filters.add_filters(p, ages=True, status_default=None)
    add_page_options(p)
    p.set_defaults(func=_cmd_list)
    examples(
        p,
        "continuity runs list --status operator",
        "continuity runs list --runner r-01 --tenant acme --older-than 10m --limit 50 --json",
    )


def _register_stats(
    usub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = usub.add_parser(
        "stats",
        parents=[common],
        help="the policy judged by outcomes: per row, class and harness, how many decisions "
        "recovered, failed again or were abandoned, and the time to recovery",
    )
    p.add_argument(
        "--since",
        type=run_filters.duration,
        default=timedelta(days=1),
        help="runs decided within this (default 24h)",
    )
    p.add_argument("--runner", type=run_filters.runner_id, default=None, help="one runner's runs")
    p.add_argument("--tenant", type=token("--tenant"), default=None, help="one tenant's runs")
    p.add_argument(
        "--max-runs",
        type=int,
        default=REPLAY_MAX_RUNS,
        help=f"read at most this many runs (default {REPLAY_MAX_RUNS})",
    )
    p.set_defaults(func=_cmd_stats)
    examples(p, "continuity runs stats", "continuity runs stats --since 7d --tenant acme --json")


def _register_retry(
    usub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = usub.add_parser(
        "retry",
        parents=[common],
        help="continue a run stopped with `operator` in a fresh session; without RUN_ID, the runs "
        "the filters match (status operator unless --status says otherwise)",
    )
    p.add_argument("run_id", metavar="RUN_ID", type=_RUN_ID, nargs="?", default=None)
    p.add_argument("--actor", required=True, type=token("--actor"), help="who decides (recorded)")
    run_filters.add_filters(p, ages=True, status_default=None)
    p.add_argument("--dry-run", action="store_true", help="list what would be retried, retry nothing")
    p.add_argument(
        "--max",
        type=page_limit,
        default=None,
        help=f"retry at most this many (1 to 1000); needed when more than {BULK_RETRY_DEFAULT_MAX} match",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_cmd_retry)
    examples(
        p,
        "continuity runs retry run-7f3a --actor alice",
        "continuity runs retry --status operator --reason native_session_retry_exhausted "
        "--dry-run --actor alice",
        "continuity runs retry --status operator --runner r-01 --max 20 --yes --actor alice",
    )
