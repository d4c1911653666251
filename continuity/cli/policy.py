"""`continuity policy show|check`: the decision policy as a file and what no policy may break;
`continuity replay`: the recorded decisions decided again under a candidate policy;
`continuity compatibility declare|revoke|list`: an adapter's new generation declared to resume
sessions saved under an older one (docs/policies.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from continuity.cli.arguments import actor_of, actor_option, connection_parent, number, token
from continuity.cli.connect import execute
from continuity.cli.examples import examples
from continuity.cli.exits import EXIT_BAD_INPUT, EXIT_OK, Failure
from continuity.cli.output import aligned, report, to_json
from continuity.cli.run_filters import duration, runner_id
from continuity.cli.tables import table
from shared.contract.components import COMPONENT_NAMES
from shared.contract.limits import REPLAY_MAX_RUNS
from shared.contract.policy import (
    Declaration,
    DeclarationsReply,
    DeclarationsRequest,
    DeclareRequest,
    ReplayChange,
    ReplayReply,
    ReplayRequest,
    RevokeRequest,
)
from shared.policy import INVARIANTS, SHIPPED, Policy, PolicyRefused, dump, from_file

# Policies ---------------------------------------------------------------------------------


def _show(args: argparse.Namespace) -> int:
    if args.invariants:
        if args.json:
            print(to_json([{"name": i.name, "text": i.text} for i in INVARIANTS]))
        else:
            print(aligned([(i.name, i.text) for i in INVARIANTS]))
        return EXIT_OK
    sys.stdout.write(dump(SHIPPED).decode())
    return EXIT_OK


def _load(path: str) -> Policy:
    try:
        return from_file(path)
    except PolicyRefused as refused:
        raise Failure(EXIT_BAD_INPUT, "policy_refused", f"{path}: {refused}") from None


def _check(args: argparse.Namespace) -> int:
    try:
        policy = _load(args.file)
    except Failure as failure:
        return report(args, failure)
    rows = len(policy.recovery) + len(policy.resume)
    if args.json:
        print(to_json({"version": policy.version, "rows": rows, "invariants": [i.name for i in INVARIANTS]}))
    else:
        print(f"Policy {policy.version}: {rows} rows; every invariant holds.")
    return EXIT_OK


# Replay -----------------------------------------------------------------------------------


def render_replay(reply: ReplayReply) -> str:
    head = (
        f"Replayed {reply.replayed} recorded decision(s) under {reply.policy} "
        f"(running: {reply.running_policy}): {reply.unchanged} unchanged, "
        f"{reply.replayed - reply.unchanged} changed."
    )
    notes = []
    if reply.skipped:
        notes.append(f"{reply.skipped} decision(s) recorded without an explanation were not replayed.")
    if reply.truncated:
        notes.append("Stopped at --max-runs: older matching runs were not read.")
    if not reply.changes:
        return "\n".join([head, *notes])
    rows = [
        [
            f"{c.action} ({c.reason})",
            f"{c.candidate_action} ({c.candidate_reason})",
            c.rule,
            c.candidate_rule,
            str(c.count),
            followed(c),
            " ".join(c.runs),
        ]
        for c in reply.changes
    ]
    changes = table(
        ["NOW", "UNDER CANDIDATE", "ROW", "CANDIDATE ROW", "RUNS", "WHAT FOLLOWED", "EXAMPLES"], rows
    )
    evidence = [evidence_line(c) for c in reply.changes]
    return "\n".join([head, *notes, "", changes, "", *evidence])


RESULT_ORDER = ("recovered", "failed", "abandoned", "held", "pending")


def followed(change: ReplayChange) -> str:
    """What followed the changed decisions under the running policy: `recovered 119, failed 9`."""
    parts = [f"{name} {change.results[name]}" for name in RESULT_ORDER if change.results.get(name)]
    return ", ".join(parts) or "-"


def evidence_line(change: ReplayChange) -> str:
    """One sentence per change: `128 retry_same_session would become operator (row 4.4.9 to
    4.4.6); 119 of them recovered, 9 failed again.`"""
    head = (
        f"{change.count} {change.action} would become {change.candidate_action} "
        f"(row {change.rule} to {change.candidate_rule})"
    )
    r = change.results
    judged = [f"{r['recovered']} of them recovered" if r.get("recovered") else "none of them recovered"]
    if r.get("failed"):
        judged.append(f"{r['failed']} failed again")
    if r.get("abandoned"):
        judged.append(f"{r['abandoned']} were abandoned")
    if r.get("held"):
        judged.append(f"{r['held']} stopped for a person")
    if r.get("pending"):
        judged.append(f"{r['pending']} have no outcome yet")
    return f"{head}; {', '.join(judged)}."


def _replay(args: argparse.Namespace) -> int:
    text: str | None = None
    if args.policy is not None:
        try:
            _load(args.policy)  # refused here, before anything is sent
            with open(args.policy, encoding="utf-8") as f:
                text = f.read()
        except Failure as failure:
            return report(args, failure)
    req = ReplayRequest(
        policy=text,
        since_s=args.since.total_seconds() if args.since is not None else None,
        runner_id=args.runner,
        tenant=args.tenant,
        max_runs=args.max_runs,
        examples=args.examples,
    )
    return execute(args, lambda c: c.replay(req), render_replay)


# Compatibility declarations ----------------------------------------------------------------


def render_declaration(d: Declaration) -> str:
    pairs = [("Declaration", d.id), ("Adapter", d.adapter)]
    if d.component:
        pairs.append(("Component", f"{d.component}: a change of it alone resumes"))
    pairs += [("By", d.declared_by), ("At", d.declared_at)]
    if d.note:
        pairs.append(("Note", d.note))
    return aligned(pairs)


def render_declarations(reply: DeclarationsReply) -> str:
    items = [
        [
            d.id,
            d.adapter,
            d.component or "(a pair of generations)",
            d.declared_by,
            d.declared_at,
            d.note or "-",
        ]
        for d in reply.items
    ]
    audit = [[a.at, a.kind, a.actor, a.id, a.adapter, a.component or "-"] for a in reply.audit]
    text = table(["ID", "ADAPTER", "COMPONENT", "BY", "AT", "NOTE"], items) if items else "No declarations."
    return (
        text
        + "\n\nAudit trail\n"
        + (table(["AT", "KIND", "ACTOR", "ID", "ADAPTER", "COMPONENT"], audit) if audit else "(empty)")
    )


def _declare(args: argparse.Namespace) -> int:
    pair = (args.saved_generation, args.ready_generation)
    if args.component and pair != (None, None):
        return report(
            args,
            Failure(EXIT_BAD_INPUT, "invalid_field", "--component declares components: give no generation"),
        )
    if not args.component and None in pair:
        return report(
            args,
            Failure(
                EXIT_BAD_INPUT,
                "missing_field",
                "give --saved-generation and --ready-generation, or --component",
            ),
        )
    if not args.component:
        req = DeclareRequest(
            adapter=args.adapter,
            saved_generation=args.saved_generation,
            ready_generation=args.ready_generation,
            actor=actor_of(args),
            note=args.note,
        )
        return execute(args, lambda c: c.declare(req), render_declaration)
    # One declaration per component: a change limited to declared components resumes.
    reqs = [
        DeclareRequest(adapter=args.adapter, component=name, actor=actor_of(args), note=args.note)
        for name in dict.fromkeys(args.component)
    ]

    async def declare_each(c: Any) -> list[Declaration]:
        return [await c.declare(req) for req in reqs]

    return execute(args, declare_each, lambda found: "\n\n".join(render_declaration(d) for d in found))


def _revoke(args: argparse.Namespace) -> int:
    req = RevokeRequest(id=args.id, actor=actor_of(args))
    return execute(args, lambda c: c.revoke_declaration(req), lambda d: f"Revoked {d.id} ({d.adapter}).")


def _list(args: argparse.Namespace) -> int:
    req = DeclarationsRequest(adapter=args.adapter)
    return execute(args, lambda c: c.declarations(req), render_declarations)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = connection_parent()
    _register_policy(sub)
    _register_replay(sub, common)
    _register_compatibility(sub, common)


def _register_policy(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    policy = sub.add_parser("policy", help="the decision policy as a file, and what no policy may break")
    verbs = policy.add_subparsers(dest="policy_command", required=True, metavar="COMMAND")
    examples(policy, "continuity policy show --invariants", "continuity policy check candidate.json")
    p = verbs.add_parser("show", help="print the shipped policy (a candidate starts from a copy)")
    p.add_argument("--invariants", action="store_true", help="print the invariants instead")
    p.add_argument("--json", action="store_true", help="with --invariants: print JSON")
    p.set_defaults(func=_show)
    examples(p, "continuity policy show > candidate.json", "continuity policy show --invariants")
    p = verbs.add_parser("check", help="check a policy file against the invariants, as a service would")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    p.set_defaults(func=_check)
    examples(p, "continuity policy check candidate.json")


def _register_replay(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "replay",
        parents=[common],
        help="decide the recorded decisions again under a candidate policy: what would change",
    )
    p.add_argument(
        "--policy", metavar="FILE", default=None, help="the candidate (default: the running policy)"
    )
    p.add_argument("--since", type=duration, default=None, help="only runs decided within this (24h, 7d)")
    p.add_argument("--runner", type=runner_id, default=None, help="only this runner_id")
    p.add_argument("--tenant", type=token("--tenant"), default=None, help="only this tenant")
    p.add_argument(
        "--max-runs",
        type=number(int, 1, REPLAY_MAX_RUNS),
        default=REPLAY_MAX_RUNS,
        help=f"read at most this many runs, newest windows first (default {REPLAY_MAX_RUNS})",
    )
    p.add_argument("--examples", type=number(int, 0, 100), default=10, help="run ids shown per change")
    p.set_defaults(func=_replay, timeout=120.0)
    examples(
        p,
        "continuity replay --policy candidate.json --since 24h",
        "continuity replay --policy candidate.json --tenant acme --json",
        "continuity replay   # the running policy: no change expected",
    )


def _register_compatibility(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    compat = sub.add_parser(
        "compatibility",
        help="declare that an adapter's new generation resumes sessions saved under an older one, "
        "or that a change of some of its components does",
    )
    verbs = compat.add_subparsers(dest="compatibility_command", required=True, metavar="COMMAND")
    examples(
        compat,
        "continuity compatibility list --adapter codex",
        "continuity compatibility declare --adapter codex --saved-generation g-41 --ready-generation g-42 "
        "--actor alice",
    )
    _register_declare(verbs, common)
    p = verbs.add_parser("revoke", parents=[common], help="revoke a declaration by its id")
    p.add_argument("id", metavar="ID")
    actor_option(p)
    p.set_defaults(func=_revoke)
    examples(p, "continuity compatibility revoke compat-0123456789abcdef --actor alice")
    p = verbs.add_parser("list", parents=[common], help="the declarations and their audit trail")
    p.add_argument("--adapter", default=None)
    p.set_defaults(func=_list)
    examples(p, "continuity compatibility list --adapter codex")


def _register_declare(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = verbs.add_parser(
        "declare",
        parents=[common],
        help="declare a pair of generations, or components (audited; no value is stored)",
        description="Declare that sessions of ADAPTER saved under --saved-generation resume under "
        "--ready-generation; or, with --component, that a change of the adapter's generation "
        "limited to declared components resumes, whatever their values (each --component is a "
        "declaration of its own; a decide resumes when every component that changed is declared, "
        "and only when the session and the runner both carry components).",
    )
    p.add_argument("--adapter", required=True, type=token("--adapter"))
    p.add_argument("--saved-generation", type=token("--saved-generation"), default=None)
    p.add_argument("--ready-generation", type=token("--ready-generation"), default=None)
    p.add_argument(
        "--component",
        action="append",
        choices=COMPONENT_NAMES,
        default=None,
        metavar="NAME",
        help="a component whose change alone resumes; repeat for several ("
        + ", ".join(COMPONENT_NAMES)
        + ")",
    )
    p.add_argument("--note", default=None, help="why (recorded)")
    actor_option(p)
    p.set_defaults(func=_declare)
    examples(
        p,
        "continuity compatibility declare --adapter codex --saved-generation g-41 --ready-generation g-42 "
        "--note 'release 4.2 reads 4.1 sessions' --actor release-bot",
        "continuity compatibility declare --adapter claude-code --component mcp_servers "
        "--note 'a new MCP server set resumes' --actor alice",
        "continuity compatibility declare --adapter claude-code --component plugins "
        "--component permission_mode "
        "--actor alice",
    )
