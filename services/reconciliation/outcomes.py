"""Outcomes on the reconciliation side (contract 4.6): the sweep that gives a run no outcome came
for its final status `abandoned`, and `continuity.runs.stats`, the policy judged by outcomes."""

from __future__ import annotations

import asyncio
import contextlib
import time

from shared.contract.runs import (
    RowSeries,
    RowStats,
    RunEntry,
    RunsListRequest,
    RunsStatsReply,
    RunsStatsRequest,
    SeriesPoint,
)
from shared.contract.times import epoch_of, rfc3339_from_epoch
from shared.platform.logs import Log
from shared.platform.redis import Redis
from shared.policy.outcomes import Judged, Tally, judge, quantile
from shared.records import keys, outcomes
from shared.records.outbox import Outbox

from .history import History, trails
from .runs_index import RunsIndex
from .step import decode_trail

log = Log("continuity.reconciliation.outcomes")

ACTOR = "reconciliation"
SWEEP_BATCH = 200
"""Runs of the index read per slice by the sweep."""
PAGE = 500
"""Runs whose trails are read per round trip of `runs.stats`."""


class Abandonment:
    """Gives the runs that waited longer than `wait_s` for their turn the status `abandoned`."""

    def __init__(self, index: RunsIndex, outbox: Outbox, wait_s: float) -> None:
        self._index = index
        self._redis = index.redis
        self._runs = index.runs
        self._outbox = outbox
        self.wait_s = wait_s

    async def sweep(self, now: float | None = None) -> int:
        """One round: the runs indexed as waiting whose decision is older than the bound; returns
        how many were abandoned."""
        now = time.time() if now is None else now
        wanted = RunsListRequest(updated_before=rfc3339_from_epoch(now - self.wait_s))
        abandoned = 0
        for status in outcomes.ABANDONABLE:
            wanted.status = status
            async for entries in self._index.scan(wanted, SWEEP_BATCH):
                for entry in entries:
                    abandoned += await self._abandon(entry, now)
        return abandoned

    async def _abandon(self, entry: RunEntry, now: float) -> int:
        sk = entry.session.key
        raw = await self._redis.execute("HMGET", keys.run(sk, entry.run_id), *outcomes.RUN_FACT_FIELDS)
        facts = outcomes.run_facts(raw)
        if facts is None or facts.status not in outcomes.ABANDONABLE:
            return 0  # gone, or moved on since it was indexed: the index follows
        decided = outcomes.waiting_decision(facts, facts.attempt)
        if decided is None or epoch_of(decided.decided_at) > now - self.wait_s:
            return 0
        outcome = outcomes.outcome_of(decided, "abandoned", facts, now)
        step = outcomes.outcome_step(outcome, ACTOR)
        code, _ = await self._runs.record_outcome(
            sk, entry.run_id, step, attempt=facts.attempt, statuses=outcomes.ABANDONABLE
        )
        if code != 1:
            return 0
        await self._outbox.flush(sk, step.outbox)
        outcomes.observe(outcome)
        log.info("run_abandoned", run_id=entry.run_id, attempt=facts.attempt, rule=decided.rule)
        return 1

    @property
    def interval_s(self) -> float:
        """How often a round runs: a tenth of the bound, between a second and a minute."""
        return min(60.0, max(1.0, self.wait_s / 10))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.sweep()
            except Exception as exc:  # Redis away: the next round goes on
                log.warning("abandonment_sweep_failed", error_type=type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)


async def runs_stats(
    index: RunsIndex, redis: Redis, req: RunsStatsRequest, history: History | None = None
) -> RunsStatsReply:
    """`continuity.runs.stats`: every decision of the runs whose last step is within `since_s`,
    judged by what followed it, grouped by row, class and harness."""
    now = time.time()
    since = now - req.since_s
    wanted = RunsListRequest(
        runner_id=req.runner_id, tenant=req.tenant, updated_after=rfc3339_from_epoch(since)
    )
    tally = Tally(bucket_s=req.bucket_s)
    statuses: dict[str, int] = {}
    runs = 0
    truncated = False
    async for entries in index.scan(wanted, PAGE):
        take = entries[: req.max_runs - runs]
        for entry, trail in zip(take, await trails(redis, history, take), strict=True):
            statuses[entry.status] = statuses.get(entry.status, 0) + 1
            for item in judge(decode_trail(trail.audit)):
                decided = _epoch(item)
                if decided is not None and decided >= since:
                    tally.count(item, trail.harness or "unknown", trail.harness_version or "unknown", decided)
        runs += len(take)
        if len(take) < len(entries):
            truncated = True
            break
    return RunsStatsReply(
        since=rfc3339_from_epoch(since),
        runs=runs,
        statuses=dict(sorted(statuses.items())),
        rows=_rows(tally),
        series=_series(tally),
        truncated=truncated,
    )


def _epoch(item: Judged) -> float | None:
    try:
        return epoch_of(item.at)
    except ValueError:
        return None


def _rows(tally: Tally) -> list[RowStats]:
    rows: list[RowStats] = []
    for (rule, action, failure_class, harness, version), group in sorted(tally.groups.items()):
        c = group.counts
        p50 = quantile(group.recovery_ms, 0.5)
        p95 = quantile(group.recovery_ms, 0.95)
        rows.append(
            RowStats(
                rule=rule,
                action=action,
                failure_class=failure_class,
                harness=harness,
                harness_version=version,
                decisions=group.decisions,
                recovered=c["recovered"],
                failed=c["failed"],
                abandoned=c["abandoned"],
                held=c["held"],
                pending=c["pending"],
                success_rate=group.success_rate,
                recovery_p50_s=p50 / 1000 if p50 is not None else None,
                recovery_p95_s=p95 / 1000 if p95 is not None else None,
                attempts_mean=sum(group.attempts) / len(group.attempts) if group.attempts else None,
            )
        )
    return rows


def _series(tally: Tally) -> list[RowSeries]:
    return [
        RowSeries(
            rule=rule,
            points=[
                SeriesPoint(at=rfc3339_from_epoch(n * tally.bucket_s), recovered=v[0], judged=v[1])
                for n, v in sorted(points.items())
            ],
        )
        for rule, points in sorted(tally.series.items())
    ]
