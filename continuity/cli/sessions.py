"""`continuity sessions get|decide|commit`: look at and try session records from a shell;
`continuity sessions transfer|ownership`: an operator moves a session to another runner and
reads the audit of its owners (contract section 10.3)."""

from __future__ import annotations

import argparse

from continuity.cli import components
from continuity.cli.arguments import actor_of, actor_option, connection_parent, runner_id, token
from continuity.cli.connect import execute
from continuity.cli.examples import examples
from continuity.cli.exits import EXIT_BAD_INPUT, Failure
from continuity.cli.output import fields, report
from continuity.cli.tables import table
from shared.contract import CommitRequest, DecideRequest, GetRequest, SessionRef
from shared.contract.policy import PreviewReply, PreviewRequest
from shared.contract.tenancy import OwnershipReply, SessionAuditReply, SessionAuditRequest, TransferRequest


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sessions = sub.add_parser("sessions", help="look at and try session records")
    verbs = sessions.add_subparsers(dest="verb", required=True)
    examples(
        sessions,
        "continuity sessions get --tenant acme --conversation c-1 --agent codex",
        "continuity sessions ownership acme c-1 codex",
        "continuity sessions transfer acme c-1 codex --to r-02 --actor alice",
    )

    common = connection_parent()
    _register_get(verbs, common)
    _register_preview(verbs, common)
    _register_decide(verbs, common)
    _register_commit(verbs, common)
    _register_transfer(verbs, common)
    _register_ownership(verbs, common)


def _register_get(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    get = verbs.add_parser("get", parents=[common], help="show a session record (never its generation value)")
    _session_args(get)
    get.set_defaults(func=_get)
    examples(get, "continuity sessions get --tenant acme --conversation c-1 --agent codex")


def _register_preview(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    preview = verbs.add_parser(
        "preview",
        parents=[common],
        help="before a rollout: how many saved sessions of an adapter would resume, or start fresh, "
        "at their next turn under a new generation, by tenant",
    )
    preview.add_argument("--adapter", required=True, type=token("--adapter"))
    preview.add_argument(
        "--generation",
        type=token("--generation"),
        default=None,
        help="the new generation (or give --components; with both, the components' generation)",
    )
    preview.add_argument("--tenant", type=token("--tenant"), default=None, help="only this tenant")
    components.components_option(
        preview,
        "a JSON file of the new release's component values, {name: value}: digested here; without "
        "--generation, each session keeps the components the file does not name (its own cwd), and "
        "the result counts the sessions by component changed",
    )
    preview.set_defaults(func=_preview, timeout=60.0)
    examples(
        preview,
        "continuity sessions preview --adapter codex --generation g-42",
        'echo \'{"model_route": "openai/gpt-5"}\' > route.json && '
        "continuity sessions preview --adapter claude-code --components route.json",
    )


def _register_decide(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    decide = verbs.add_parser(
        "decide", parents=[common], help="ask the resume decision, as a runner at ready"
    )
    _session_args(decide)
    decide.add_argument("--adapter", required=True)
    decide.add_argument("--model", required=True)
    decide.add_argument("--cwd", required=True)
    decide.add_argument("--latest-cursor")
    decide.add_argument("--compatibility", choices=["none", "profile-ready"], default="none")
    decide.add_argument("--ready-generation")
    components.components_option(decide)
    decide.set_defaults(func=_decide)
    examples(
        decide,
        "continuity sessions decide --tenant acme --conversation c-1 --agent codex "
        "--adapter codex --model gpt-5 --cwd /work",
        "continuity sessions decide --tenant acme --conversation c-1 --agent claude "
        "--adapter claude-code --model sonnet --cwd /work --compatibility profile-ready "
        "--components ready.json   # names the components that changed",
    )


def _register_commit(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    commit = verbs.add_parser(
        "commit", parents=[common], help="commit a session record, as a runner after a turn"
    )
    _session_args(commit)
    commit.add_argument("--native-session-id", required=True)
    commit.add_argument("--adapter", required=True)
    commit.add_argument("--model", required=True)
    commit.add_argument("--cwd", required=True)
    commit.add_argument("--cursor")
    commit.add_argument("--prompt-hash")
    commit.add_argument(
        "--checkpoint-policy",
        default="same_session_only",
        choices=[
            "same_session_only",
            "allow_replacement_after_governed_wait",
            "allow_replacement_after_resume_failure",
        ],
    )
    commit.add_argument("--generation", help="compatibility generation (omit to clear)")
    components.components_option(commit)
    commit.add_argument("--expected-revision", type=int)
    commit.add_argument("--epoch", type=int)
    commit.add_argument("--cancelled", action="store_true")
    commit.set_defaults(func=_commit)
    examples(
        commit,
        "continuity sessions commit --tenant acme --conversation c-1 --agent codex "
        "--native-session-id s-1 --adapter codex --model gpt-5 --cwd /work",
    )


def _register_transfer(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    transfer = verbs.add_parser(
        "transfer",
        parents=[common],
        help="give a session to another runner of its tenant (fences the previous owner)",
    )
    _session_positionals(transfer)
    transfer.add_argument("--to", required=True, type=runner_id, metavar="RUNNER_ID", help="the new owner")
    actor_option(transfer)
    transfer.set_defaults(func=_transfer)
    examples(transfer, "continuity sessions transfer acme c-1 codex --to r-02 --actor alice")


def _register_ownership(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    ownership = verbs.add_parser(
        "ownership", parents=[common], help="the changes of a session's owner, oldest first"
    )
    _session_positionals(ownership)
    ownership.set_defaults(func=_ownership)
    examples(
        ownership,
        "continuity sessions ownership acme c-1 codex",
        "continuity sessions ownership acme c-1 codex --json",
    )


def render_preview(reply: PreviewReply) -> str:
    head = (
        f"{reply.scanned} saved session(s) of {reply.adapter} under policy {reply.policy}: "
        f"{reply.resume} would resume, {reply.fresh} would start fresh (full transcript) at their next turn."
    )
    rows = [
        [
            t.tenant,
            str(t.resume),
            str(t.fresh),
            ", ".join(f"{r}: {n}" for r, n in t.reasons.items()) or "-",
            ", ".join(f"{c}: {n}" for c, n in t.changed_components.items()) or "-",
        ]
        for t in reply.by_tenant
    ]
    columns = ["TENANT", "RESUME", "FRESH", "FRESH BY REASON", "CHANGED COMPONENTS"]
    text = head + ("\n\n" + table(columns, rows) if rows else "")
    if reply.declarations:
        text += "\n\nResumed by declarations: " + " ".join(reply.declarations)
    return text


def _preview(args: argparse.Namespace) -> int:
    try:
        digests = components.read(args.components) if args.components is not None else None
        if args.generation is None and digests is None:
            raise Failure(EXIT_BAD_INPUT, "missing_field", "give --generation, --components or both")
    except Failure as failure:
        return report(args, failure)
    req = PreviewRequest(
        adapter=args.adapter,
        generation=args.generation,
        tenant=args.tenant,
        components=digests,  # type: ignore[arg-type]
    )
    return execute(args, lambda c: c.preview(req), render_preview)


def _session_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", required=True, type=token("--tenant"))
    parser.add_argument("--conversation", required=True, type=token("--conversation"), help="conversation_id")
    parser.add_argument("--agent", required=True, type=token("--agent"), help="agent_id")


def _session_positionals(parser: argparse.ArgumentParser) -> None:
    # Named like the options of `get`, so that a `not_found` names the session the same way.
    parser.add_argument("tenant", metavar="TENANT", type=token("TENANT"))
    parser.add_argument("conversation", metavar="CONVERSATION", type=token("CONVERSATION"))
    parser.add_argument("agent", metavar="AGENT", type=token("AGENT"))


def _session(args: argparse.Namespace) -> SessionRef:
    return SessionRef(tenant=args.tenant, conversation_id=args.conversation, agent_id=args.agent)


def _get(args: argparse.Namespace) -> int:
    return execute(args, lambda c: c.get(GetRequest(session=_session(args))), fields)


def _decide(args: argparse.Namespace) -> int:
    try:
        digests, ready = components.on_the_wire(args.components, args.ready_generation)
    except Failure as failure:
        return report(args, failure)
    req = DecideRequest(
        session=_session(args),
        adapter=args.adapter,
        model=args.model,
        cwd=args.cwd,
        latest_cursor=args.latest_cursor,
        compatibility=args.compatibility,
        ready_generation=ready,
        ready_components=digests,  # type: ignore[arg-type]
    )
    return execute(args, lambda c: c.decide(req), fields)


def _commit(args: argparse.Namespace) -> int:
    try:
        digests, generation = components.on_the_wire(args.components, args.generation)
    except Failure as failure:
        return report(args, failure)
    req = CommitRequest(
        session=_session(args),
        native_session_id=args.native_session_id,
        adapter=args.adapter,
        model=args.model,
        cwd=args.cwd,
        cursor=args.cursor,
        prompt_hash=args.prompt_hash,
        checkpoint_policy=args.checkpoint_policy,
        compatibility_generation=generation,
        expected_revision=args.expected_revision,
        epoch=args.epoch,
        cancelled=args.cancelled,
        compatibility_components=digests,  # type: ignore[arg-type]
    )
    return execute(args, lambda c: c.commit(req), fields)


def _transfer(args: argparse.Namespace) -> int:
    req = TransferRequest(session=_session(args), runner_id=args.to, actor=actor_of(args))
    return execute(args, lambda c: c.transfer(req), _render_transfer)


def _render_transfer(reply: OwnershipReply) -> str:
    if reply.previous_owner is None or reply.previous_owner == reply.owner:
        return f"{fields(reply)}\n\nOwned by {reply.owner} from epoch {reply.epoch}."
    return (
        f"{fields(reply)}\n\nOwned by {reply.owner} from epoch {reply.epoch}: commits of "
        f"{reply.previous_owner} are refused session_not_owned, and any commit that carries an older "
        f"epoch stale_epoch."
    )


def _ownership(args: argparse.Namespace) -> int:
    req = SessionAuditRequest(session=_session(args))
    return execute(args, lambda c: c.ownership(req), _render_ownership)


def _render_ownership(reply: SessionAuditReply) -> str:
    if not reply.items:
        return "No owner recorded: no runner has committed this session (or it does not exist)."
    rows = [[e.at, e.kind, e.actor, e.previous_owner or "-", e.owner, str(e.epoch)] for e in reply.items]
    return table(["AT", "CHANGE", "ACTOR", "PREVIOUS OWNER", "OWNER", "EPOCH"], rows)
