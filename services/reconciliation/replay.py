"""`continuity.policy.replay`: the recorded decisions of the runs the index knows, decided again
under a candidate policy (shared/policy/replay.py), read a slice of the index at a time."""

from __future__ import annotations

import time

from shared.contract.errors import POLICY_REFUSED
from shared.contract.policy import ReplayReply, ReplayRequest
from shared.contract.runs import RunsListRequest
from shared.contract.times import rfc3339_from_epoch
from shared.platform.redis import Redis
from shared.policy import Policy, PolicyRefused, load
from shared.policy.outcomes import judge
from shared.policy.replay import Outcome, Recorded, ordered, replay

from .history import History, trails
from .runs_index import RunsIndex
from .step import decode_trail

PAGE = 500
"""Runs read per page of the index, and their audit trails per round trip."""


def candidate_of(req: ReplayRequest, running: Policy) -> Policy:
    if req.policy is None:
        return running
    try:
        return load(req.policy.encode())
    except PolicyRefused as refused:
        raise POLICY_REFUSED.error(str(refused)) from None


async def replay_runs(
    index: RunsIndex, redis: Redis, running: Policy, req: ReplayRequest, history: History | None = None
) -> ReplayReply:
    candidate = candidate_of(req, running)
    after = rfc3339_from_epoch(time.time() - req.since_s) if req.since_s is not None else None
    wanted = RunsListRequest(runner_id=req.runner_id, tenant=req.tenant, updated_after=after)
    outcome = Outcome()
    runs = skipped = 0
    truncated = False
    async for entries in index.scan(wanted, PAGE):
        take = entries[: req.max_runs - runs]
        recorded: list[Recorded] = []
        for entry, trail in zip(take, await trails(redis, history, take), strict=True):
            for item in judge(decode_trail(trail.audit)):
                if item.kind != "decision":
                    continue  # an operator's: no table decided it
                if item.explanation is None:
                    skipped += 1  # recorded before explanations were
                    continue
                recorded.append(
                    Recorded(
                        entry.run_id,
                        item.recorded_action,
                        item.recorded_reason,
                        item.explanation,
                        result=item.result,
                    )
                )
        replay(recorded, candidate, req.examples, into=outcome)
        runs += len(take)
        if len(take) < len(entries):
            truncated = True
            break
    return ReplayReply(
        policy=candidate.version,
        running_policy=running.version,
        replayed=outcome.replayed,
        unchanged=outcome.unchanged,
        changes=ordered(outcome),
        skipped=skipped,
        truncated=truncated,
    )
