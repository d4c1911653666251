"""`continuity memory estimate`: Redis bytes per run, measured, and the steady-state memory for a
rate and a retention.

It records a sample of runs on a real Redis (one it starts, or REDIS_URL) with the services' own
steps and scripts, each to its end: every failed attempt decided (the classifier's table, the
archiver's local move or its refusal, the reconciliation service's open, resolve and retry) and
followed by the runner's commit, then the completed turn's outcome and the run's entry in the
runs index. It publishes nothing (an outbox entry is removed as a flush would), then sums
`MEMORY USAGE` of every key the sample wrote. A finished run's records live for the retention
after its last step; an archive copy (a replaced session's, or a held record kept aside by the
next commit) for the archive retention; a session record as long as the session. A finished run's own
records leave Redis after the linger (`--history-linger-s`, CONTINUITY_HISTORY_LINGER_S), once
CONTINUITY_HISTORY holds them (contract 9.14), and its runs index entry once the stream lists
the run; its stored-runs members stay for the retention. So in steady state Redis holds

    runs/day x (retention days x bytes kept + linger days x bytes lingering) per run
  + runs/day x archive copies per run x archive retention days x bytes per archive copy
  + sessions x bytes per session record

times the overhead the server adds to the keys' own bytes (its dictionaries, the expiry table,
allocator slack: measured on a server it started as used_memory growth, less the clients'
buffers and the script cache, over MEMORY USAGE), plus the empty server's own memory.
`continuity bench memory` measures the same through the running services.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
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
from shared.contract import subjects
from shared.contract.decisions import ArchiveWork, Decision, Explanation, ReconcileWork, RunOutcome
from shared.contract.events import ErrorInfo, HarnessInfo, ResumeFailed, ToolCall
from shared.contract.reconciliation import Resolution
from shared.contract.runs import RunEntry
from shared.contract.sessions import CommitRequest, SessionRef
from shared.contract.times import now_rfc3339
from shared.contract.types import Action, CheckpointPolicy, ClassSource, DecisionReason
from shared.platform.redis import TRANSIENT_REDIS_ERRORS, Redis
from shared.policy import SHIPPED
from shared.policy.policy import decide_recovery
from shared.policy.recovery import Facts, Row
from shared.records import decisions, keys, names, outcomes, reconciliations, scripts, steps
from shared.records.retention import Retention
from shared.records.session import SavedSession, commit_args, saved_session
from shared.records.store import RunStore

JOURNEYS = ("retry", "replacement", "operator", "reconcile")
"""A run's kind of journey; a journey of the mix is its kind, with `*N` when it fails N times
before its turn completes and `-failed` for a replacement whose archive failed (then retried)."""
MIXES: dict[str, dict[str, int]] = {
    # Out of 100 finished runs, the paths the simulator's default mix takes through the
    # services (`continuity bench memory`): most retry the same session or are replaced after
    # an archive, a quarter stop for an operator, some again at later attempts.
    "typical": {
        "retry": 31,
        "retry*2": 2,
        "replacement": 25,
        "replacement*2": 2,
        "replacement-failed": 5,
        "operator": 14,
        "operator*2": 5,
        "operator*3": 3,
        "operator*5": 2,
        "reconcile": 8,
        "reconcile*2": 2,
        "reconcile*3": 1,
    },
    **{name: {name: 1} for name in JOURNEYS},
}
_CWD = "/workspace/acme/repositories/continuity-platform/services/runner"
_HARNESS = HarnessInfo(name="claude-code", version="2.1.332")
_decode_archive = msgspec.json.Decoder(ArchiveWork).decode
_decode_reconcile = msgspec.json.Decoder(ReconcileWork).decode
_decode_decision = msgspec.json.Decoder(Decision).decode
_decode_outcome = msgspec.json.Decoder(RunOutcome).decode
_encode = msgspec.json.Encoder().encode


def kind_of(journey: str) -> str:
    return journey.split("*", 1)[0].split("-", 1)[0]


def attempts_of(journey: str) -> int:
    _, _, count = journey.partition("*")
    return int(count) if count else 1


@dataclass
class Sample:
    """What one sample wrote: its keys by the retention that bounds them, and its run's entry in
    the runs index (shared keys, removed by entry)."""

    run_keys: list[str] = field(default_factory=list)
    archive_keys: list[str] = field(default_factory=list)
    session_keys: list[str] = field(default_factory=list)
    indexed: tuple[str, str] | None = None
    """(run_id, version) of its runs index entry."""


RUNNER_ID = "runner-7f3a9c2d"


def _event(run_id: str, session: SessionRef, kind: str, attempt: int, native: str) -> ResumeFailed:
    return ResumeFailed(
        type="resume_failed",
        event_id=f"evt-{uuid.uuid4().hex}",
        runner_id=RUNNER_ID,
        run_id=run_id,
        attempt=attempt,
        session=session,
        native_session_id=native,
        occurred_at=now_rfc3339(),
        error=ErrorInfo(
            type="ProviderError",
            code="runner_remote_provider_artifact_incompatible" if kind == "operator" else "transport_closed",
            message="the provider closed the transport",
        ),
        pending_tool_call=(
            ToolCall(
                tool_call_id=f"call-{uuid.uuid4().hex[:16]}",
                tool_name="github_create_pull_request",
                started_at=now_rfc3339(),
            )
            if kind == "reconcile"
            else None
        ),
        harness=_HARNESS,
    )


async def _flush(client: Redis, sk: str, step: steps.RunStep, published: list[bytes]) -> None:
    """What a publication does to the outbox: its entries leave it. The decisions and outcomes
    among them are kept for the runs index."""
    if step.outbox:
        await client.execute("HDEL", keys.outbox(sk), *(e.msg_id for e in step.outbox))
    published += [e.payload for e in step.outbox if e.subject.startswith(_DECISIONS)]


_DECISIONS = subjects.decisions("")
_FACTS: dict[str, Facts] = {
    # The classifier's facts for each kind's event; the shipped policy decides them.
    "retry": Facts("unclassified", False, 1, "same_session_only", False),
    "operator": Facts("provider_state_incompatible", False, 1, "same_session_only", False),
    "reconcile": Facts("unclassified", True, 1, "same_session_only", False),
    "replacement": Facts("unclassified", False, 1, "allow_replacement_after_resume_failure", False),
}
_SOURCE: dict[str, ClassSource] = {"operator": "error_code"}
_REPLACEMENT_REASON: DecisionReason = "native_session_continuity_break"
_ARCHIVE_FAILED_REASON: DecisionReason = "runner_continuity_break_archive_failed"
_OPERATOR = "alice@example.com"


def _decided(kind: str, attempt: int) -> tuple[Row, Explanation]:
    facts = dataclasses.replace(_FACTS[kind], attempt=attempt)
    return decide_recovery(SHIPPED, facts, _SOURCE.get(kind, "none"))


def _first_step(event: ResumeFailed, kind: str, saved: SavedSession, now: float) -> steps.RunStep:
    """The step the classifier records for the event, with its explanation and the run's
    outcome facts (the harness named, and on the first attempt the time of the failure)."""
    slot = names.classifier_slot(event.attempt)
    row, why = _decided(kind, event.attempt)
    if row.verdict == "archive":
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
        step = decisions.archive_step(
            work, _REPLACEMENT_REASON, "classifier", now, read=saved.read, explanation=why
        )
    else:
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
        step = decisions.decision_step(
            decided,
            slot,
            "classifier",
            native_session_id=event.native_session_id,
            also=also,
            read=saved.read,
            explanation=why,
        )
    # The classifier's run fields for the outcome statistics (contract 4.6).
    step.run_fields[outcomes.HARNESS_FIELD] = _HARNESS.name
    step.run_fields[outcomes.HARNESS_VERSION_FIELD] = _HARNESS.version or ""
    if event.attempt == 1:
        step.run_fields[outcomes.FIRST_FAILED_FIELD] = str(round(now * 1000))
    return step


def _commit(session: SessionRef, native: str, policy: CheckpointPolicy, epoch: int | None) -> CommitRequest:
    return CommitRequest(
        session=session,
        native_session_id=native,
        adapter="deepseek-harness",
        model="deepseek-harness-pro",
        cwd=_CWD,
        cursor=f"cursor-{uuid.uuid4().hex}",
        prompt_hash=f"{uuid.uuid4().hex}{uuid.uuid4().hex}",
        checkpoint_policy=policy,
        compatibility_generation="dsh-2026.11.3-build.4471",
        epoch=epoch,
    )


async def _count_stored(client: Redis, tenant: str, run_id: str) -> None:
    """Counted against its runner's and its tenant's stored runs, as the classifier does (the
    entry of shared/records/scripts/stored_run_count.lua)."""
    for owner_key in (keys.runner_runs(RUNNER_ID), keys.tenant_runs(tenant)):
        await client.execute("ZADD", owner_key, "NX", int(time.time() * 1000), run_id)


@dataclass
class Ids:
    """The sampled runs' identifiers: as long as the UUIDs runners commonly use (the default), or,
    with `simulated`, as the simulator's (`continuity bench memory` compares like with like:
    what a finished run keeps after the linger is mostly identifiers)."""

    simulated: bool = False
    count: int = 0
    prefix: str = field(default_factory=lambda: f"sim{uuid.uuid4().hex[:6]}")

    def run_id(self) -> str:
        self.count += 1
        return f"{self.prefix}-sim-r01-{self.count:06d}" if self.simulated else f"run-{uuid.uuid4().hex}"

    def conversation(self, run_id: str) -> str:
        return run_id if self.simulated else f"conv-{uuid.uuid4().hex}"

    def native(self, run_id: str) -> str:
        return f"ns-{run_id}-{uuid.uuid4().hex[:4]}" if self.simulated else f"ns-{uuid.uuid4().hex}"


async def record_journey(
    client: Redis, journey: str, retention: Retention, tag: str, ids: Ids | None = None
) -> Sample:
    """Record one run of `journey` to its end, as the services and a runner would: each failed
    attempt decided and followed (a replacement committed, a fresh session committed over a
    held record), then the turn completed and the run's entry in the runs index. Returns its
    keys."""
    kind, attempts = kind_of(journey), attempts_of(journey)
    runs = RunStore(client, retention)
    ids = ids or Ids()
    run_id = ids.run_id()
    session = SessionRef(tenant=_tenant(tag), conversation_id=ids.conversation(run_id), agent_id="codex")
    sk = session.key
    policy: CheckpointPolicy = (
        "allow_replacement_after_resume_failure" if kind == "replacement" else "same_session_only"
    )
    native = ids.native(run_id)
    # Committed by its runner, as runners do: the record holds its owner, with the binding in
    # the session's ownership history (contract 10.3).
    commit = _commit(session, native, policy, None)
    code, _, _ = await runs.session_commit(sk, commit_args(commit, RUNNER_ID, retention.archive_ms))
    assert code == "ok", code
    await runs.index_run(run_id, sk)
    sample = Sample(session_keys=[keys.session(sk), keys.session_ownership(sk)])
    published: list[bytes] = []
    for attempt in range(1, attempts + 1):
        saved = saved_session(await client.hgetall(keys.session(sk)))
        event = _event(run_id, session, kind, attempt, native)
        first = _first_step(event, kind, saved, time.time())
        assert await runs.record_step(sk, run_id, first) is None
        await _flush(client, sk, first, published)
        if attempt == 1:
            await _count_stored(client, session.tenant, run_id)
        if first.outbox and first.outbox[0].subject == subjects.WORK_ARCHIVE:
            work = _decode_archive(first.outbox[0].payload)
            if journey.endswith("-failed"):
                await _archive_failed(runs, work, saved, sample, published)
            else:
                epoch = await _replace(runs, work, saved, sample, published)
                native = ids.native(run_id)  # the replacement, committed at the new epoch
                await _commit_over(runs, session, native, policy, epoch, retention)
        elif kind == "operator":
            run = _decode_decision(first.slot_value)
            _, step = reconciliations.continue_fresh(
                run, "operator_retry", _OPERATOR, "operator_retry", time.time()
            )
            code, _ = await runs.record_retry(sk, run_id, step, attempt=run.attempt)
            assert code == "retried", code
            await _flush(client, sk, step, published)
        elif kind == "reconcile":
            await _reconcile(runs, _decode_reconcile(first.outbox[1].payload), published)
        if kind in ("operator", "reconcile"):
            # A fresh session committed over the held record, which is kept aside (contract 3.2).
            sample.archive_keys.append(keys.held_archive(sk, native))
            native = ids.native(run_id)
            await _commit_over(runs, session, native, policy, saved.epoch, retention)
    sample.indexed = await _turn_completed(runs, sk, run_id, attempts, published)
    sample.run_keys += _run_keys(sk, run_id)
    return sample


def _run_keys(sk: str, run_id: str) -> list[str]:
    """The keys a run's history lives under."""
    return [
        keys.run(sk, run_id),
        keys.run_decisions(sk, run_id),
        keys.run_audit(sk, run_id),
        keys.reconciliation(sk, run_id),
        keys.reconciliation_history(sk, run_id),
        keys.outbox(sk),
        keys.run_index(run_id),
    ]


async def _commit_over(
    runs: RunStore,
    session: SessionRef,
    native: str,
    policy: CheckpointPolicy,
    epoch: int | None,
    retention: Retention,
) -> None:
    commit = _commit(session, native, policy, epoch)
    code, _, _ = await runs.session_commit(session.key, commit_args(commit, RUNNER_ID, retention.archive_ms))
    assert code == "ok", code


async def _turn_completed(
    runs: RunStore, sk: str, run_id: str, attempt: int, published: list[bytes]
) -> tuple[str, str]:
    """The classifier's outcome of the completed turn, then the run's entry in the runs index:
    the index keeps one entry a run, its last (the reconciliation service's entry of an
    outcome). Returns the entry's run_id and version."""
    raw = await runs.redis.execute("HMGET", keys.run(sk, run_id), *outcomes.RUN_FACT_FIELDS)
    facts = outcomes.run_facts(raw)
    decided = outcomes.waiting_decision(facts, attempt)
    assert facts is not None and decided is not None, run_id
    now = time.time()
    outcome = outcomes.outcome_of(
        decided,
        outcomes.RECOVERED_BY_ACTION[decided.action],
        facts,
        now,
        recovery_ms=outcomes.recovery_ms_of(facts, round(now * 1000)),
    )
    step = outcomes.outcome_step(outcome, "classifier", for_runner=RUNNER_ID)
    code, _ = await runs.record_outcome(sk, run_id, step, attempt=attempt, statuses=outcomes.TURN_MAY_FOLLOW)
    assert code == 1, code
    await _flush(runs.redis, sk, step, published)
    last = _decode_outcome(published[-1])
    entry = RunEntry(
        run_id=last.run_id,
        runner_id=last.runner_id,
        session=last.session,
        attempt=last.attempt,
        status=last.status,
        action=last.action,
        reason=last.reason,
        decision_id=last.decision_id,
        updated_at=last.recorded_at,
        recovery_ms=last.recovery_ms,
    )
    when = datetime.fromisoformat(entry.updated_at).timestamp()
    rank = 1 if entry.action == "continue_fresh" else 0
    version = f"{round(when * 1_000_000):018d}:{entry.attempt:04d}:{rank}"
    status_number = scripts.RUN_STATUSES.index(entry.status) + 1
    assert await runs.runs_index_apply(run_id, version, _encode(entry), when, status_number)
    return run_id, version


async def _replace(
    runs: RunStore, work: ArchiveWork, saved: SavedSession, sample: Sample, published: list[bytes]
) -> int:
    """The archiver's remote move (answered at once) and local move; the new epoch."""
    sk = work.session.key
    slot = names.archive_slot(work.attempt)
    begin = {"archive_id": work.archive_id, "run_id": work.run_id, "runner_id": work.runner_id}
    begin |= {"attempt": str(work.attempt), "updated_at": now_rfc3339()}
    await runs.archive_begin(sk, work.run_id, work.archive_id, slot, 35_000, begin)
    moved = {"state": "remote_ok", "exit_code": "0", "timed_out": "false", "detail": ""}
    assert await runs.archive_result(sk, work.archive_id, {**moved, "updated_at": now_rfc3339()})
    epoch = (saved.epoch or 0) + 1
    decided = decisions.decision(
        work,
        "open_replacement",
        _REPLACEMENT_REASON,
        time.time(),
        failure_class=work.failure_class,
        epoch=epoch,
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
    await _flush(runs.redis, sk, step, published)
    sample.run_keys.append(keys.archive_progress(sk, work.archive_id))
    sample.archive_keys.append(keys.archive_copy(sk, work.archive_id))
    return epoch


async def _archive_failed(
    runs: RunStore, work: ArchiveWork, saved: SavedSession, sample: Sample, published: list[bytes]
) -> None:
    """The runner's move failed: the archiver decides a retry of the same session, with the
    bounded detail of the failure (contract 5.3)."""
    sk = work.session.key
    slot = names.archive_slot(work.attempt)
    begin = {"archive_id": work.archive_id, "run_id": work.run_id, "runner_id": work.runner_id}
    begin |= {"attempt": str(work.attempt), "updated_at": now_rfc3339()}
    await runs.archive_begin(sk, work.run_id, work.archive_id, slot, 35_000, begin)
    detail = "runner_continuity_break_archive_failed: exit=1 timed_out=false: the provider refused the move"
    failed = {"state": "remote_failed", "exit_code": "1", "timed_out": "false", "detail": detail}
    assert await runs.archive_result(sk, work.archive_id, {**failed, "updated_at": now_rfc3339()})
    decided = decisions.decision(
        work,
        "retry_same_session",
        _ARCHIVE_FAILED_REASON,
        time.time(),
        backoff_s=5.0,
        failure_class=work.failure_class,
        epoch=saved.epoch,
        detail=detail,
    )
    step = decisions.decision_step(decided, slot, "archiver", native_session_id=work.native_session_id)
    assert await runs.record_step(sk, work.run_id, step) is None
    await _flush(runs.redis, sk, step, published)
    done = {"state": "done", "decision_id": decided.decision_id, "updated_at": decided.decided_at}
    await runs.archive_done(sk, work.archive_id, done)
    sample.run_keys.append(keys.archive_progress(sk, work.archive_id))


async def _reconcile(runs: RunStore, work: ReconcileWork, published: list[bytes]) -> None:
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
    await _flush(runs.redis, sk, step, published)
    await runs.reconciliation_index_put(sk, work.run_id, score, False)


def journeys_of(mix: str, runs: int) -> list[str]:
    """`runs` journeys in the proportions of `mix`, interleaved (smooth weighted round robin, of
    the kinds and then of each kind's journeys), so that any sample of a few cycles has every
    kind of the mix."""
    weights = MIXES[mix]
    by_kind: dict[str, dict[str, int]] = {}
    for name, weight in weights.items():
        by_kind.setdefault(kind_of(name), {})[name] = weight
    kinds = _round_robin({k: sum(v.values()) for k, v in by_kind.items()}, runs)
    within = {k: iter(_round_robin(v, kinds.count(k))) for k, v in by_kind.items()}
    return [next(within[k]) for k in kinds]


def _round_robin(weights: dict[str, int], count: int) -> list[str]:
    total = sum(weights.values())
    current = dict.fromkeys(weights, 0)
    chosen: list[str] = []
    for _ in range(count):
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


async def server_memory(client: Redis) -> tuple[int, int, int]:
    """`used_memory`, and the parts of it that are no run's: the clients' buffers (`tot-mem` of
    `CLIENT LIST`, however many connections are open) and the script cache (filled as scripts
    are first used)."""
    info = await _memory_info(client)
    listed: bytes = await client.execute("CLIENT", "LIST")
    clients = sum(
        int(part.split("=", 1)[1])
        for line in listed.decode().splitlines()
        for part in line.split()
        if part.startswith("tot-mem=")
    )
    scripts_cache = int(info.get("used_memory_scripts", info.get("used_memory_scripts_eval", 0)))
    return int(info["used_memory"]), clients, scripts_cache


RECONCILIATION_LISTING = [
    *(keys.reconciliations_open(b) for b in range(keys.RECONCILIATION_BUCKETS)),
    *(keys.reconciliations_delivered(b) for b in range(keys.RECONCILIATION_BUCKETS)),
]
RUNS_INDEX = [
    name
    for b in range(keys.RUNS_INDEX_BUCKETS)
    for name in (
        keys.runs_index_versions(b),
        keys.runs_index_entries(b),
        keys.runs_index_listing(b),
        *(keys.runs_index_listing(b, status) for status in scripts.RUN_STATUSES),
    )
]
INDEX_KEYS = RECONCILIATION_LISTING + RUNS_INDEX
"""Keys every run shares: the reconciliation listing's buckets and the runs index's."""


@dataclass
class Measurement:
    runs: int
    mix: str
    by_journey: dict[str, float]
    """Bytes per finished run by kind of journey (its share of the shared keys included)."""
    run_bytes: float
    archive_copy_bytes: float
    """Per copy: a replaced session's, or a held record's kept aside by the next commit."""
    archive_copies: float
    """Copies per run."""
    session_bytes: float
    overhead: float
    baseline_bytes: int
    source: str
    lingering_bytes: float = 0.0
    """Of `run_bytes`, the records a finished run keeps only for the linger once its history is
    in CONTINUITY_HISTORY (contract 9.14): run record, decisions, audit trail, reconciliation,
    run lookup, and its runs index entry (once the stream lists the run); the rest (the
    stored-runs sets' members, the reconciliation listing) is kept for the retention."""


async def measure(
    client: Redis, mix: str, runs: int, *, own_server: bool, ids: Ids | None = None
) -> Measurement:
    """Record `runs` runs of `mix` with long retentions (nothing expires while it is measured),
    sum their keys' memory, and remove them again."""
    ids = ids or Ids()
    retention = Retention.of_seconds(86_400.0)
    tag = uuid.uuid4().hex[:8]
    listing_before = await _memory(client, RECONCILIATION_LISTING)
    index_before = await _memory(client, RUNS_INDEX)
    # The stored-runs sets of this sample's runner and tenant (contract 10.6): new, so all theirs.
    quota_keys = [keys.runner_runs(RUNNER_ID), keys.tenant_runs(_tenant(tag))]
    used_before = await server_memory(client)
    samples: list[tuple[str, Sample]] = []
    for journey in journeys_of(mix, runs):
        samples.append((journey, await record_journey(client, journey, retention, tag, ids)))
    used_after = await server_memory(client)
    listing_bytes = await _memory(client, RECONCILIATION_LISTING) - listing_before
    index_bytes = await _memory(client, RUNS_INDEX) - index_before
    shared_bytes = index_bytes + await _memory(client, quota_keys)
    per_kind: dict[str, list[int]] = {}
    run_total = archive_total = session_total = copies = 0
    for journey, sample in samples:
        run_bytes = await _memory(client, sample.run_keys)
        per_kind.setdefault(kind_of(journey), []).append(run_bytes)
        run_total += run_bytes
        archive_total += await _memory(client, sample.archive_keys)
        copies += len(sample.archive_keys)
        session_total += await _memory(client, sample.session_keys)
    reconciles = len(per_kind.get("reconcile", []))
    if reconciles:  # the listing's entries belong to the runs that opened a reconciliation
        per_kind["reconcile"] = [b + listing_bytes // reconciles for b in per_kind["reconcile"]]
    lingering_total = run_total + index_bytes  # the entries too, once the stream lists the runs
    run_total += listing_bytes + shared_bytes
    per_kind = {name: [b + shared_bytes // runs for b in v] for name, v in per_kind.items()}
    keys_total = run_total + archive_total + session_total
    grown = (
        (used_after[0] - used_before[0]) - (used_after[1] - used_before[1]) - (used_after[2] - used_before[2])
    )
    overhead = max(1.0, grown / keys_total) if own_server and keys_total else 1.0
    info = await _memory_info(client)
    await _remove(client, samples, tag)
    for name in quota_keys:
        await client.execute("DEL", name)
    return Measurement(
        runs=runs,
        mix=mix,
        by_journey={name: sum(v) / len(v) for name, v in per_kind.items()},
        run_bytes=run_total / runs,
        archive_copy_bytes=archive_total / copies if copies else 0.0,
        archive_copies=copies / runs,
        session_bytes=session_total / runs,
        overhead=overhead,
        baseline_bytes=int(info.get("used_memory_startup", 0)),
        source="started" if own_server else "REDIS_URL",
        lingering_bytes=lingering_total / runs,
    )


async def _remove(client: Redis, samples: list[tuple[str, Sample]], tag: str) -> None:
    runs = RunStore(client)
    for _, sample in samples:
        for name in [*sample.run_keys, *sample.archive_keys, *sample.session_keys]:
            await client.execute("DEL", name)  # one key a command: any slot of a cluster
        if sample.indexed is not None:
            await runs.runs_index_forget(*sample.indexed)
    ours = f"{_tenant(tag)}/".encode()
    for name in RECONCILIATION_LISTING:
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
    linger_days: float
    run_records_bytes: float
    archive_copies_bytes: float
    session_records_bytes: float
    total_bytes: float
    maxmemory_bytes: float


def estimate(
    m: Measurement,
    runs_per_day: float,
    retention_days: float,
    archive_days: float,
    sessions: int,
    linger_days: float | None = None,
) -> Estimate:
    """The steady state; with `linger_days`, a finished run's lingering records are held that
    long and the rest for the retention (contract 9.14), else everything for the retention."""
    kept_days = retention_days if linger_days is None else min(linger_days, retention_days)
    per_run = (m.run_bytes - m.lingering_bytes) * retention_days + m.lingering_bytes * kept_days
    runs = runs_per_day * per_run * m.overhead
    archives = runs_per_day * m.archive_copies * archive_days * m.archive_copy_bytes * m.overhead
    session_records = sessions * m.session_bytes * m.overhead
    total = runs + archives + session_records + m.baseline_bytes
    return Estimate(
        runs_per_day=runs_per_day,
        retention_days=retention_days,
        archive_retention_days=archive_days,
        sessions=sessions,
        linger_days=kept_days,
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
        f"  of which {m.lingering_bytes:,.0f} leave Redis after the linger (CONTINUITY_HISTORY keeps them)",
        f"archive copy: {m.archive_copy_bytes:,.0f} bytes, {m.archive_copies:.2f} per run "
        "(replaced sessions, held records kept aside)",
        f"session record: {m.session_bytes:,.0f} bytes",
        f"server overhead on the keys' bytes: x{m.overhead:.2f}; empty server {_human(m.baseline_bytes)}",
        f"steady state at {e.runs_per_day:,.0f} runs/day, retention {e.retention_days:g} days, "
        f"linger {e.linger_days:g} days "
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
    return await on_own_server(run)


async def on_own_server(run: Callable[[Redis, bool], Awaitable[Measurement]]) -> Measurement:
    """`run` on a Redis started for it, and stopped after."""
    from continuity.devstack.servers import RedisServer

    with tempfile.TemporaryDirectory(prefix="continuity-memory-") as tmp:
        # Redis 7 keeps a latency histogram of about 25 KB per command name once it is used:
        # the server's own, whatever the runs, so off on the server measured here.
        server = RedisServer(Path(tmp), extra_args=("--latency-tracking", "no"))
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
    e = estimate(
        m,
        args.runs_per_day,
        args.retention_days,
        args.archive_retention_days,
        args.sessions,
        args.history_linger_s / 86_400,
    )
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
    est.add_argument(
        "--history-linger-s",
        type=_positive,
        default=86_400.0,
        help="CONTINUITY_HISTORY_LINGER_S (86400): how long a finished run's records stay in Redis "
        "once CONTINUITY_HISTORY holds them",
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
