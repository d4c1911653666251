"""`continuity sessions get|decide|commit`: look at and try session records from a shell."""

from __future__ import annotations

import argparse

from continuity.clitools import add_connection_args, emit, fields, run_client
from shared.client import ContinuityClient
from shared.contracts import CommitRequest, DecideRequest, GetRequest, SessionRef


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sessions = sub.add_parser("sessions", help="look at and try session records")
    verbs = sessions.add_subparsers(dest="verb", required=True)

    get = verbs.add_parser("get", help="show a session record (never its generation value)")
    _session_args(get)
    get.set_defaults(func=_get)

    decide = verbs.add_parser("decide", help="ask the resume decision, as a runner at ready")
    _session_args(decide)
    decide.add_argument("--adapter", required=True)
    decide.add_argument("--model", required=True)
    decide.add_argument("--cwd", required=True)
    decide.add_argument("--latest-cursor")
    decide.add_argument("--compatibility", choices=["none", "profile-ready"], default="none")
    decide.add_argument("--ready-generation")
    decide.set_defaults(func=_decide)

    commit = verbs.add_parser("commit", help="commit a session record, as a runner after a turn")
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
    add_connection_args(parser)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--conversation", required=True, help="conversation_id")
    parser.add_argument("--agent", required=True, help="agent_id")


def _session(args: argparse.Namespace) -> SessionRef:
    return SessionRef(tenant=args.tenant, conversation_id=args.conversation, agent_id=args.agent)


def _get(args: argparse.Namespace) -> int:
    async def body(client: ContinuityClient) -> int:
        emit(args, await client.get(GetRequest(session=_session(args))), fields)
        return 0

    return run_client(args, body)


def _decide(args: argparse.Namespace) -> int:
    async def body(client: ContinuityClient) -> int:
        req = DecideRequest(
            session=_session(args),
            adapter=args.adapter,
            model=args.model,
            cwd=args.cwd,
            latest_cursor=args.latest_cursor,
            compatibility=args.compatibility,
            ready_generation=args.ready_generation,
        )
        emit(args, await client.decide(req), fields)
        return 0

    return run_client(args, body)


def _commit(args: argparse.Namespace) -> int:
    async def body(client: ContinuityClient) -> int:
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
        emit(args, await client.commit(req), fields)
        return 0

    return run_client(args, body)
