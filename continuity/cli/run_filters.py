"""The options that pick runs and decisions (`runs list`, `runs retry`, `watch`), checked before
anything is sent, and the durations they take (`10m`, `2h`)."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from typing import get_args

from continuity.cli.arguments import token
from shared.contract.decisions import Decision
from shared.contract.runs import RunsListRequest
from shared.contract.times import rfc3339_from_epoch
from shared.contract.types import RUNNER_ID_PATTERN, DecisionReason, RunStatus
from shared.records.decisions import STATUS_BY_ACTION

_DURATION = re.compile(r"(\d{1,9})([smhd])\Z")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RUNNER = re.compile(RUNNER_ID_PATTERN)


def duration(value: str) -> timedelta:
    """`30s`, `10m`, `2h`, `7d`."""
    match = _DURATION.match(value)
    if match is None:
        raise argparse.ArgumentTypeError("must be a number and a unit: 30s, 10m, 2h, 7d")
    return timedelta(seconds=int(match.group(1)) * _UNIT_S[match.group(2)])


def runner_id(value: str) -> str:
    if not _RUNNER.match(value):
        raise argparse.ArgumentTypeError("--runner must be 1 to 64 of A-Z a-z 0-9 _ -")
    return value


def ago(delta: timedelta) -> str:
    """The RFC 3339 time `delta` before now."""
    return str(rfc3339_from_epoch((datetime.now(UTC) - delta).timestamp()))


def add_filters(parser: argparse.ArgumentParser, *, ages: bool, status_default: str | None) -> None:
    default = f" (default: {status_default})" if status_default else ""
    parser.add_argument(
        "--status", choices=get_args(RunStatus), default=status_default, help=f"the run's status{default}"
    )
    parser.add_argument("--runner", type=runner_id, default=None, help="only this runner_id")
    parser.add_argument("--tenant", type=token("--tenant"), default=None, help="only this tenant")
    parser.add_argument(
        "--reason", choices=get_args(DecisionReason), default=None, help="only this decision reason"
    )
    if ages:
        parser.add_argument(
            "--older-than", type=duration, default=None, help="last decided longer ago than this (10m, 2h)"
        )
        parser.add_argument(
            "--newer-than", type=duration, default=None, help="last decided within this (10m, 2h)"
        )


def has_filters(args: argparse.Namespace) -> bool:
    return any(
        getattr(args, name, None) is not None
        for name in ("runner", "tenant", "reason", "older_than", "newer_than")
    )


def list_request(args: argparse.Namespace, limit: int, cursor: str | None = None) -> RunsListRequest:
    return RunsListRequest(
        status=args.status,
        runner_id=args.runner,
        tenant=args.tenant,
        reason=args.reason,
        updated_before=ago(args.older_than) if args.older_than is not None else None,
        updated_after=ago(args.newer_than) if args.newer_than is not None else None,
        limit=limit,
        cursor=cursor,
    )


def decision_matches(decision: Decision, args: argparse.Namespace) -> bool:
    """The same filters, on one decision as it is published (`watch`)."""
    return (
        (args.status is None or STATUS_BY_ACTION[decision.action] == args.status)
        and (args.runner is None or decision.runner_id == args.runner)
        and (args.tenant is None or decision.session.tenant == args.tenant)
        and (args.reason is None or decision.reason == args.reason)
    )
