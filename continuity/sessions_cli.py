"""`continuity sessions get|decide|commit`: look at and try session records from a shell."""

from __future__ import annotations

import argparse

from continuity.clitools import connection_parent, execute, fields, token
from shared.contracts import CommitRequest, DecideRequest, GetRequest, SessionRef


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sessions = sub.add_parser("sessions", help="look at and try session records")
    verbs = sessions.add_subparsers(dest="verb", required=True)

    common = connection_parent()
    get = verbs.add_parser("get", parents=[common], help="show a session record (never its generation value)")
    _session_args(get)
    get.set_defaults(func=_get)

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
    decide.set_defaults(func=_decide)

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
    commit.add_argument("--expected-revision", type=int)
    commit.add_argument("--epoch", type=int)
    commit.add_argument("--cancelled", action="store_true")
    commit.set_defaults(func=_commit)


def _session_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", required=True, type=token("--tenant"))
    parser.add_argument("--conversation", required=True, type=token("--conversation"), help="conversation_id")
    parser.add_argument("--agent", required=True, type=token("--agent"), help="agent_id")


def _session(args: argparse.Namespace) -> SessionRef:
    return SessionRef(tenant=args.tenant, conversation_id=args.conversation, agent_id=args.agent)


def _get(args: argparse.Namespace) -> int:
    return execute(args, lambda c: c.get(GetRequest(session=_session(args))), fields)


def _decide(args: argparse.Namespace) -> int:
    req = DecideRequest(
        session=_session(args),
        adapter=args.adapter,
        model=args.model,
        cwd=args.cwd,
        latest_cursor=args.latest_cursor,
        compatibility=args.compatibility,
        ready_generation=args.ready_generation,
    )
    return execute(args, lambda c: c.decide(req), fields)


def _commit(args: argparse.Namespace) -> int:
    req = CommitRequest(
        session=_session(args),
        native_session_id=args.native_session_id,
        adapter=args.adapter,
        model=args.model,
        cwd=args.cwd,
        cursor=args.cursor,
        prompt_hash=args.prompt_hash,
        checkpoint_policy=args.checkpoint_policy,
        compatibility_generation=args.generation,
        expected_revision=args.expected_revision,
        epoch=args.epoch,
        cancelled=args.cancelled,
    )
    return execute(args, lambda c: c.commit(req), fields)
