"""`continuity memory estimate`: Redis bytes per run, measured, and the steady-state memory for a
rate and a retention.

It records a sample of runs on a real Redis (one it starts, or REDIS_URL) with the services' own
steps and scripts (the classifier's table, the archiver's local move, the reconciliation
service's open, resolve and retry), publishes nothing (an outbox entry is removed as a flush
would), then sums `MEMORY USAGE` of every key the sample wrote. A finished run's records live
for the retention after its last step; an archive copy for the archive retention; a session
record as long as the session. So in steady state Redis holds

    runs/day x retention days x bytes per run
  + runs/day x share of replacements x archive retention days x bytes per archive copy
  + sessions x bytes per session record

times the overhead the server adds to the keys' own bytes (its dictionaries, the expiry table,
allocator slack: measured on a server it started as used_memory growth over MEMORY USAGE), plus
the empty server's own memory.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import cast

import msgspec

from continuity.cli.examples import examples
from shared.contract.decisions import ArchiveWork, Decision, Explanation, ReconcileWork
from shared.contract.events import ErrorInfo, ResumeFailed, ToolCall
from shared.contract.reconciliation import Resolution
from shared.contract.sessions import CommitRequest, SessionRef
from shared.contract.times import now_rfc3339
from shared.contract.types import Action, CheckpointPolicy, ClassSource, DecisionReason
from shared.platform.redis import TRANSIENT_REDIS_ERRORS, Redis
from shared.policy import SHIPPED
from shared.policy.policy import decide_recovery
from shared.policy.recovery import Facts, Row
from shared.records import decisions, keys, names, reconciliations, steps
from shared.records.retention import Retention
from shared.records.session import SavedSession, commit_args, saved_session
from shared.records.store import RunStore

JOURNEYS = ("retry", "replacement", "operator", "reconcile")
MIXES: dict[str, dict[str, int]] = {
    # Out of 20 runs that stopped at least once: most retry the same session, a quarter are
    # replaced after an archive, the rest stop for a person.
    "typical": {"retry": 10, "replacement": 5, "operator": 3, "reconcile": 2},
    **{name: {name: 1} for name in JOURNEYS},
}
_INCOMPATIBLE = "runner_remote_provider_artifact_incompatible"
_CWD = "/workspace/acme/repositories/continuity-platform/services/runner"
_decode_archive = msgspec.json.Decoder(ArchiveWork).decode
_decode_reconcile = msgspec.json.Decoder(ReconcileWork).decode
_decode_decision = msgspec.json.Decoder(Decision).decode


@dataclass
class Sample:
    """What one sample wrote: its keys by the retention that bounds them."""

    run_keys: list[str] = field(default_factory=list)
    archive_keys: list[str] = field(default_factory=list)
    session_keys: list[str] = field(default_factory=list)


RUNNER_ID = "runner-7f3a9c2d"


def _event(run_id: str, session: SessionRef, journey: str) -> ResumeFailed:
    return ResumeFailed(
        type="resume_failed",
        event_id=f"evt-{uuid.uuid4().hex}",
        runner_id=RUNNER_ID,
        run_id=run_id,
        attempt=1,
        session=session,
        native_session_id=f"ns-{uuid.uuid4().hex}",
        occurred_at=now_rfc3339(),
        error=ErrorInfo(
            type="ProviderError",
            code="runner_remote_provider_artifact_incompatible"
            if journey == "operator"
            else "transport_closed",
            message="the provider closed the transport",
        ),
        pending_tool_call=(
            ToolCall(
                tool_call_id=f"call-{uuid.uuid4().hex[:16]}",
                tool_name="github_create_pull_request",
                started_at=now_rfc3339(),
            )
            if journey == "reconcile"
            else None
        ),
    )


async def _flush(client: Redis, sk: str, step: steps.RunStep) -> None:
    """What a publication does to the outbox: its entries leave it."""
    if step.outbox:
        await client.execute("HDEL", keys.outbox(sk), *(e.msg_id for e in step.outbox))


_FACTS: dict[str, Facts] = {
    # The classifier's facts for each journey's event; the shipped policy decides them.
    "retry": Facts("unclassified", False, 1, "same_session_only", False),
    "operator": Facts("provider_state_incompatible", False, 1, "same_session_only", False),
    "reconcile": Facts("unclassified", True, 1, "same_session_only", False),
    "replacement": Facts("unclassified", False, 1, "allow_replacement_after_resume_failure", False),
}
_SOURCE: dict[str, ClassSource] = {"operator": "error_code"}
_REPLACEMENT_REASON: DecisionReason = "native_session_continuity_break"
_OPERATOR = "alice@example.com"


def _decided(journey: str) -> tuple[Row, Explanation]:
    return decide_recovery(SHIPPED, _FACTS[journey], _SOURCE.get(journey, "none"))


def _first_step(event: ResumeFailed, journey: str, saved: SavedSession, now: float) -> steps.RunStep:
    """The step the classifier records for the journey's event, with its explanation."""
    slot = names.classifier_slot(event.attempt)
    row, why = _decided(journey)
    if journey == "replacement":
        work = ArchiveWork(
            archive_id=names.archive_id(event.run_id, event.attempt),
            runner_id=event.runner_id,
            run_id=event.run_id,
            attempt=event.attempt,
            session=event.session,
            native_session_id=event.native_session_id,
            failure_class="unclassified",
            rule=row.id,
        )
        return decisions.archive_step(
            work, _REPLACEMENT_REASON, "classifier", now, read=saved.read, explanation=why
        )
    action = cast(Action, row.verdict)
    decided = decisions.decision(
        event, action, row.reason, now, backoff_s=5.0, epoch=saved.epoch, rule=row.id
    )
    also = []
    if action == "reconcile":
        work_item = ReconcileWork(
            runner_id=event.runner_id,
            run_id=event.run_id,
            attempt=event.attempt,
            session=event.session,
            native_session_id=event.native_session_id,
            tool_call=event.pending_tool_call,
            decision_id=decided.decision_id,
            opened_at=decided.decided_at,
        )
        also.append(decisions.reconcile_entry(work_item))
    return decisions.decision_step(
        decided,
        slot,
        "classifier",
        native_session_id=event.native_session_id,
        also=also,
        read=saved.read,
        explanation=why,
    )


async def record_journey(client: Redis, journey: str, retention: Retention, tag: str) -> Sample:
    """Record one run of `journey` to its end, as the services would; returns its keys."""
    runs = RunStore(client, retention)
    session = SessionRef(tenant=_tenant(tag), conversation_id=f"conv-{uuid.uuid4().hex}", agent_id="codex")
    sk = session.key
    run_id = f"run-{uuid.uuid4().hex}"
    policy: CheckpointPolicy = (
        "allow_replacement_after_resume_failure" if journey == "replacement" else "same_session_only"
    )
    event = _event(run_id, session, journey)
    # Committed by its runner, as runners do: the record holds its owner, with the binding in
    # the session's ownership history (contract 10.3).
    commit = CommitRequest(
        session=session,
        native_session_id=event.native_session_id,
        adapter="deepseek-harness",
        model="deepseek-harness-pro",
        cwd=_CWD,
        cursor=f"cursor-{uuid.uuid4().hex}",
        prompt_hash=f"{uuid.uuid4().hex}{uuid.uuid4().hex}",
        checkpoint_policy=policy,
        compatibility_generation="dsh-2026.11.3-build.4471",
    )
    code, _, _ = await runs.session_commit(sk, commit_args(commit, event.runner_id, retention.archive_ms))
    assert code == "ok", code
    saved = saved_session(await client.hgetall(keys.session(sk)))
    await runs.index_run(run_id, sk)
    first = _first_step(event, journey, saved, time.time())
    assert await runs.record_step(sk, run_id, first) is None
    await _flush(client, sk, first)
    # Counted against its runner's and its tenant's stored runs, as the classifier does.
    for owner_key in (keys.runner_runs(event.runner_id), keys.tenant_runs(session.tenant)):
        # What the classifier's stored-runs flusher writes (services/classifier/stored_runs.py).
        await client.execute("ZADD", owner_key, "NX", int(time.time() * 1000), run_id)
    sample = Sample(session_keys=[keys.session(sk), keys.session_ownership(sk)])
    if journey == "replacement":
        await _replace(runs, _decode_archive(first.outbox[0].payload), saved, sample)
    elif journey == "operator":
        run = _decode_decision(first.slot_value)
        _, step = reconciliations.continue_fresh(
            run, "operator_retry", _OPERATOR, "operator_retry", time.time()
        )
        code, _ = await runs.record_retry(sk, run_id, step, attempt=run.attempt)
        assert code == "retried", code
        await _flush(client, sk, step)
    elif journey == "reconcile":
        await _reconcile(runs, _decode_reconcile(first.outbox[1].payload))
    sample.run_keys += [
        keys.run(sk, run_id),
        keys.run_decisions(sk, run_id),
        keys.run_audit(sk, run_id),
        keys.reconciliation(sk, run_id),
        keys.reconciliation_history(sk, run_id),
        keys.outbox(sk),
        keys.run_index(run_id),
    ]
    return sample


async def _replace(runs: RunStore, work: ArchiveWork, saved: SavedSession, sample: Sample) -> None:
    """The archiver's remote move (answered at once) and local move."""
    sk = work.session.key
    slot = names.archive_slot(work.attempt)
    begin = {"archive_id": work.archive_id, "run_id": work.run_id, "runner_id": work.runner_id}
    begin |= {"attempt": str(work.attempt), "updated_at": now_rfc3339()}
    await runs.archive_begin(sk, work.run_id, work.archive_id, slot, 35_000, begin)
    moved = {"state": "remote_ok", "exit_code": "0", "timed_out": "false", "detail": ""}
    assert await runs.archive_result(sk, work.archive_id, {**moved, "updated_at": now_rfc3339()})
    decided = decisions.decision(
        work,
        "open_replacement",
        _REPLACEMENT_REASON,
        time.time(),
        failure_class=work.failure_class,
        epoch=(saved.epoch or 0) + 1,
        rule=work.rule,
    )
    step = decisions.decision_step(decided, slot, "archiver")
    progress = {
        **moved,
        "state": "done",
        "decision_id": decided.decision_id,
        "updated_at": decided.decided_at,
    }
    status, _ = await runs.record_local_move(
        sk, work.run_id, work.archive_id, step, epoch=saved.epoch or 0, progress=progress
    )
    assert status == "recorded", status
    await _flush(runs.redis, sk, step)
    sample.run_keys.append(keys.archive_progress(sk, work.archive_id))
    sample.archive_keys.append(keys.archive_copy(sk, work.archive_id))


async def _reconcile(runs: RunStore, work: ReconcileWork) -> None:
    """The reconciliation's record opened and listed, then resolved by an operator."""
    sk = work.session.key
    fields = reconciliations.record_fields(work)
    _, opened_at = await runs.reconciliation_open(
        sk, work.run_id, work.attempt, fields, reconciliations.opened_audit(work, fields)
    )
    score = datetime.fromisoformat(opened_at).timestamp()
    await runs.reconciliation_index_put(sk, work.run_id, score, True)
    decided, step = reconciliations.continue_fresh(
        work, "execution_reconciled", _OPERATOR, "operator_resolve", time.time(), "completed"
    )
    evidence = "Checked the repository: the pull request was opened once, number 4711."
    resolution = Resolution(
        action_outcome="completed", evidence=evidence, actor=_OPERATOR, resolved_at=decided.decided_at
    )
    code, _ = await runs.record_resolution(
        sk,
        work.run_id,
        step,
        outcome="completed",
        resolution=resolution,
        decision_id=decided.decision_id,
        attempt=work.attempt,
    )
    assert code == "resolved", code
    await _flush(runs.redis, sk, step)
    await runs.reconciliation_index_put(sk, work.run_id, score, False)


def journeys_of(mix: str, runs: int) -> list[str]:
    """`runs` journeys in the proportions of `mix`, interleaved (smooth weighted round robin),
    so that any sample of a few cycles has every journey of the mix."""
    weights = MIXES[mix]
    total = sum(weights.values())
    current = dict.fromkeys(weights, 0)
    chosen: list[str] = []
    for _ in range(runs):
        for name, weight in weights.items():
            current[name] += weight
        pick = max(current, key=lambda name: current[name])
        current[pick] -= total
        chosen.append(pick)
    return chosen


async def _memory(client: Redis, names: list[str]) -> int:
    used = await client.batch([("MEMORY", "USAGE", name, "SAMPLES", "0") for name in names])
    return sum(int(v or 0) for v in used)


async def _memory_info(client: Redis) -> dict[str, str]:
    """`INFO memory` as its fields (on Redis Cluster, of one master)."""
    raw: bytes = await client.execute("INFO", "memory")
    lines = raw.decode().splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line and not line.startswith("#"))


async def _used_memory(client: Redis) -> int:
    return int((await _memory_info(client))["used_memory"])


INDEX_KEYS = [
    *(keys.reconciliations_open(b) for b in range(keys.RECONCILIATION_BUCKETS)),
    *(keys.reconciliations_delivered(b) for b in range(keys.RECONCILIATION_BUCKETS)),
]


@dataclass
class Measurement:
    runs: int
    mix: str
    by_journey: dict[str, float]
    run_bytes: float
    archive_copy_bytes: float
    replacement_share: float
    session_bytes: float
    overhead: float
    baseline_bytes: int
    source: str


async def measure(client: Redis, mix: str, runs: int, *, own_server: bool) -> Measurement:
    """Record `runs` runs of `mix` with long retentions (nothing expires while it is measured),
    sum their keys' memory, and remove them again."""
    retention = Retention.of_seconds(86_400.0)
    tag = uuid.uuid4().hex[:8]
    index_before = await _memory(client, INDEX_KEYS)
    # The stored-runs sets of this sample's runner and tenant (contract 10.6): new, so all theirs.
    quota_keys = [keys.runner_runs(RUNNER_ID), keys.tenant_runs(_tenant(tag))]
    used_before = await _used_memory(client)
    samples: list[tuple[str, Sample]] = []
    for journey in journeys_of(mix, runs):
        samples.append((journey, await record_journey(client, journey, retention, tag)))
    used_after = await _used_memory(client)
    index_bytes = await _memory(client, INDEX_KEYS) - index_before
    quota_bytes = await _memory(client, quota_keys)
    per_journey: dict[str, list[int]] = {}
    run_total = archive_total = session_total = 0
    for journey, sample in samples:
        run_bytes = await _memory(client, sample.run_keys)
        per_journey.setdefault(journey, []).append(run_bytes)
        run_total += run_bytes
        archive_total += await _memory(client, sample.archive_keys)
        session_total += await _memory(client, sample.session_keys)
    reconciles = len(per_journey.get("reconcile", []))
    if reconciles:  # the listing's entries belong to the runs that opened a reconciliation
        per_journey["reconcile"] = [b + index_bytes // reconciles for b in per_journey["reconcile"]]
    run_total += index_bytes + quota_bytes
    per_journey = {name: [b + quota_bytes // runs for b in v] for name, v in per_journey.items()}
    replacements = len(per_journey.get("replacement", []))
    keys_total = run_total + archive_total + session_total
    overhead = max(1.0, (used_after - used_before) / keys_total) if own_server and keys_total else 1.0
    info = await _memory_info(client)
    await _remove(client, samples, tag)
    for name in quota_keys:
        await client.execute("DEL", name)
    return Measurement(
        runs=runs,
        mix=mix,
        by_journey={name: sum(v) / len(v) for name, v in per_journey.items()},
        run_bytes=run_total / runs,
        archive_copy_bytes=archive_total / replacements if replacements else 0.0,
        replacement_share=replacements / runs,
        session_bytes=session_total / runs,
        overhead=overhead,
        baseline_bytes=int(info.get("used_memory_startup", 0)),
        source="started" if own_server else "REDIS_URL",
    )


async def _remove(client: Redis, samples: list[tuple[str, Sample]], tag: str) -> None:
    for _, sample in samples:
        for name in [*sample.run_keys, *sample.archive_keys, *sample.session_keys]:
            await client.execute("DEL", name)  # one key a command: any slot of a cluster
    ours = f"{_tenant(tag)}/".encode()
    for name in INDEX_KEYS:
        members = [m for m in await client.execute("ZRANGE", name, 0, -1) if m.startswith(ours)]
        if members:
            await client.zrem(name, *members)


def _tenant(tag: str) -> str:
    return f"acme-{tag}"


@dataclass
class Estimate:
    runs_per_day: float
    retention_days: float
    archive_retention_days: float
    sessions: int
    run_records_bytes: float
    archive_copies_bytes: float
    session_records_bytes: float
    total_bytes: float
    maxmemory_bytes: float


def estimate(
    m: Measurement, runs_per_day: float, retention_days: float, archive_days: float, sessions: int
) -> Estimate:
    runs = runs_per_day * retention_days * m.run_bytes * m.overhead
    archives = runs_per_day * m.replacement_share * archive_days * m.archive_copy_bytes * m.overhead
    session_records = sessions * m.session_bytes * m.overhead
    total = runs + archives + session_records + m.baseline_bytes
    return Estimate(
        runs_per_day=runs_per_day,
        retention_days=retention_days,
        archive_retention_days=archive_days,
        sessions=sessions,
        run_records_bytes=runs,
        archive_copies_bytes=archives,
        session_records_bytes=session_records,
        total_bytes=total,
        # The memory alert fires at 80% of maxmemory: the steady state stays below it.
        maxmemory_bytes=total / 0.8,
    )


def _human(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"


def report(m: Measurement, e: Estimate) -> str:
    lines = [
        f"sample: {m.runs} runs, mix {m.mix}, on a Redis {m.source}",
        "bytes per finished run (MEMORY USAGE of its keys, listing entries included):",
        *(f"  {name:<12} {value:>8,.0f}" for name, value in m.by_journey.items()),
        f"  {'average':<12} {m.run_bytes:>8,.0f}",
        f"archive copy: {m.archive_copy_bytes:,.0f} bytes, for {m.replacement_share:.0%} of runs",
        f"session record: {m.session_bytes:,.0f} bytes",
        f"server overhead on the keys' bytes: x{m.overhead:.2f}; empty server {_human(m.baseline_bytes)}",
        f"steady state at {e.runs_per_day:,.0f} runs/day, retention {e.retention_days:g} days "
        f"(archives {e.archive_retention_days:g} days), {e.sessions:,} sessions:",
        f"  run records     {_human(e.run_records_bytes):>12}",
        f"  archive copies  {_human(e.archive_copies_bytes):>12}",
        f"  session records {_human(e.session_records_bytes):>12}",
        f"  total           {_human(e.total_bytes):>12}",
        f"  maxmemory at least {_human(e.maxmemory_bytes)} (the memory alert fires at 80%)",
    ]
    return "\n".join(lines)


async def _with_redis(run: Callable[[Redis, bool], Awaitable[Measurement]]) -> Measurement:
    url = os.environ.get("REDIS_URL", "").strip()
    if url:
        from shared.platform.config import Config

        client = Redis.from_config(Config.from_env())
        try:
            await client.connect()
            return await run(client, False)
        finally:
            await client.aclose()
    from continuity.devstack.servers import RedisServer

    with tempfile.TemporaryDirectory(prefix="continuity-memory-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            client = Redis(server.url, cluster="off")
            try:
                return await run(client, True)
            finally:
                await client.aclose()
        finally:
            server.stop()


def _positive(raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number")
    return value


def _count(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _estimate_command(args: argparse.Namespace) -> int:
    async def run(client: Redis, own: bool) -> Measurement:
        return await measure(client, args.mix, args.sample, own_server=own)

    try:
        m = asyncio.run(_with_redis(run))
    except (*TRANSIENT_REDIS_ERRORS, RuntimeError) as err:
        print(f"continuity memory: Redis unavailable ({type(err).__name__})", file=sys.stderr)
        return 4
    e = estimate(m, args.runs_per_day, args.retention_days, args.archive_retention_days, args.sessions)
    if args.json:
        print(msgspec.json.encode({"measurement": m.__dict__, "estimate": e.__dict__}).decode())
    else:
        print(report(m, e))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    memory = sub.add_parser("memory", help="Redis memory per run and in steady state, measured")
    kinds = memory.add_subparsers(dest="kind", required=True)
    examples(memory, "continuity memory estimate --runs-per-day 10000 --retention-days 30")
    est = kinds.add_parser(
        "estimate",
        help="measure bytes per run on a real Redis and print the steady-state memory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    est.add_argument(
        "--runs-per-day", type=_positive, required=True, help="runs that stop at least once, per day"
    )
    est.add_argument("--retention-days", type=_positive, default=30.0, help="CONTINUITY_RETENTION_DAYS (30)")
    est.add_argument(
        "--archive-retention-days",
        type=_positive,
        default=90.0,
        help="CONTINUITY_ARCHIVE_RETENTION_DAYS (90)",
    )
    est.add_argument("--sessions", type=int, default=0, help="saved sessions at any time (0)")
    est.add_argument("--mix", choices=sorted(MIXES), default="typical", help="the journeys sampled (typical)")
    est.add_argument("--sample", type=_count, default=1000, help="runs recorded to measure (1000)")
    est.add_argument("--json", action="store_true", help="print JSON")
    est.set_defaults(func=_estimate_command)
    examples(
        est,
        "continuity memory estimate --runs-per-day 10000 --retention-days 30",
        "continuity memory estimate --runs-per-day 10000 --retention-days 7 --sessions 20000 --json",
    )
