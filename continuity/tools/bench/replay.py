"""`continuity bench replay`: how fast the reconciliation service replays recorded decisions under
a candidate policy, next to a raw read of the same audit trails from Redis and the decision
rule alone, measured in the same run.

The runs are recorded as the classifier records them (its step script, with explanations, over
every fact the recovery table reads, in turn) and their decisions published on the decisions
stream, where the service's runs index finds them, as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import msgspec
import nats

from continuity.cli.examples import examples
from continuity.tools.bench.deployment import deployment, machine
from shared.contract import SessionRef, subjects
from shared.contract.client import ContinuityClient
from shared.contract.decisions import Explanation
from shared.contract.policy import ReplayRequest
from shared.contract.reconciliation import AuditEntry
from shared.contract.types import Action, ClassSource
from shared.platform.redis import Redis
from shared.policy import SHIPPED, dump, load
from shared.policy.invariants import recovery_facts
from shared.policy.policy import decide_recovery
from shared.policy.recovery import Facts, Row
from shared.policy.replay import Recorded, replay
from shared.records import decisions, keys, names
from shared.records.store import RunStore

BATCH = 500
"""Runs recorded, published and read per round trip."""

_STRIDE = 7919
"""A prime: consecutive runs take facts far apart, so even a few runs meet every row."""


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("replay", help="replaying recorded decisions under a candidate policy")
    p.add_argument("--runs", type=int, default=100_000, help="recorded runs to replay (default 100000)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)
    examples(p, "continuity bench replay", "continuity bench replay --runs 20000 --json")


class _Run(msgspec.Struct):
    run_id: str
    runner_id: str
    attempt: int
    session: SessionRef


def _decided(facts: Facts) -> tuple[Row, Explanation]:
    source: ClassSource = "none" if facts.failure_class == "unclassified" else "error_code"
    return decide_recovery(SHIPPED, facts, source)


async def record(redis_url: str, nats_url: str, count: int) -> None:
    """`count` runs, each decided by the shipped policy and recorded with its explanation. Facts
    that ask for an archive are left out: their decision is the archiver's, after a runner's
    move, and the index follows decisions."""
    client = Redis(redis_url)
    runs = RunStore(client)
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    facts = [f for f in recovery_facts(SHIPPED.recovery) if _decided(f)[0].verdict != "archive"]
    now = time.time()
    for start in range(0, count, BATCH):
        steps = []
        for i in range(start, min(start + BATCH, count)):
            row, why = _decided(facts[(i * _STRIDE) % len(facts)])
            session = SessionRef(tenant=f"t{i % 7}", conversation_id=f"c-{i}", agent_id="codex")
            run = _Run(f"run-{i:08d}", f"r-{i % 11}", why.attempt, session)
            decided = decisions.decision(run, cast(Action, row.verdict), row.reason, now, rule=row.id)
            step = decisions.decision_step(
                decided, names.classifier_slot(run.attempt), "classifier", explanation=why
            )
            steps.append((session.key, run.run_id, msgspec.structs.replace(step, outbox=[]), decided))
        await asyncio.gather(*(runs.record_step(sk, run_id, step) for sk, run_id, step, _ in steps))
        await asyncio.gather(*(runs.index_run(run_id, sk) for sk, run_id, _, _ in steps))
        acks = [
            js.publish(
                subjects.decisions(d.runner_id),
                msgspec.json.encode(d),
                headers={"Nats-Msg-Id": d.decision_id},
            )
            for _, _, _, d in steps
        ]
        await asyncio.gather(*acks)
    await nc.close()
    await client.aclose()


async def indexed(nats_url: str, timeout_s: float = 600.0) -> None:
    """Until the runs index has applied every decision on the stream."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = await js.consumer_info(subjects.DECISIONS_STREAM, subjects.RUNS_INDEX_CONSUMER)
        if not info.num_pending and not info.num_ack_pending:
            break
        await asyncio.sleep(0.5)  # poll interval of a deadline-bounded wait
    await nc.close()


async def raw_read(redis_url: str, count: int) -> tuple[float, list[Recorded]]:
    """The baseline: every run's audit trail read and decoded straight from Redis, pipelined."""
    client = Redis(redis_url)
    recorded: list[Recorded] = []
    began = time.perf_counter()
    for start in range(0, count, BATCH):
        commands = []
        for i in range(start, min(start + BATCH, count)):
            sk = SessionRef(tenant=f"t{i % 7}", conversation_id=f"c-{i}", agent_id="codex").key
            commands.append(("LRANGE", keys.run_audit(sk, f"run-{i:08d}"), 0, -1))
        for n, trail in enumerate(await client.batch(commands)):
            for raw in trail:
                entry = msgspec.json.decode(raw, type=AuditEntry)
                if entry.explanation is not None and entry.action and entry.reason:
                    recorded.append(
                        Recorded(f"run-{start + n:08d}", entry.action, entry.reason, entry.explanation)
                    )
    elapsed = time.perf_counter() - began
    await client.aclose()
    return elapsed, recorded


def candidate_text() -> str:
    doc = json.loads(dump(SHIPPED))
    doc["version"] = "bench-candidate"
    next(r for r in doc["recovery"] if r["id"] == "4.4.9").update(
        action="operator", reason="native_session_retry_exhausted"
    )
    return json.dumps(doc)


async def measure(d: Any, count: int) -> dict[str, Any]:
    url, redis_url = d.stack.nats_url, d.stack.redis_url
    began = time.perf_counter()
    await record(redis_url, url, count)
    await indexed(url)
    seeded_s = time.perf_counter() - began
    nc = await nats.connect(url)
    c = ContinuityClient(nc, timeout=3600)
    timings: dict[str, float] = {}
    replies = {}
    for name, policy in (("running", None), ("candidate", candidate_text())):
        t0 = time.perf_counter()
        replies[name] = await c.replay(ReplayRequest(policy=policy))
        timings[name] = time.perf_counter() - t0
    await nc.close()
    raw_s, recorded = await raw_read(redis_url, count)
    t0 = time.perf_counter()
    pure = replay(recorded, load(candidate_text().encode()))
    rule_s = time.perf_counter() - t0
    candidate = replies["candidate"]
    return {
        "runs": count,
        "seeded_s": round(seeded_s, 1),
        "replayed": candidate.replayed,
        "changed": candidate.replayed - candidate.unchanged,
        "running_unchanged": replies["running"].unchanged == replies["running"].replayed,
        "service_running_per_s": round(replies["running"].replayed / timings["running"]),
        "service_candidate_per_s": round(candidate.replayed / timings["candidate"]),
        "raw_read_per_s": round(len(recorded) / raw_s),
        "rule_only_per_s": round(pure.replayed / rule_s),
    }


def report(r: dict[str, Any]) -> str:
    ratio = r["service_candidate_per_s"] / r["raw_read_per_s"] if r["raw_read_per_s"] else 0.0
    return "\n".join(
        [
            f"replay of {r['replayed']} recorded decisions ({r['runs']} runs, seeded in {r['seeded_s']} s):",
            f"  service, running policy     {r['service_running_per_s']:>10,} decisions/s"
            f"  (no change: {r['running_unchanged']})",
            f"  service, candidate          {r['service_candidate_per_s']:>10,} decisions/s"
            f"  ({r['changed']} changed)",
            f"  baseline: raw audit read    {r['raw_read_per_s']:>10,} decisions/s"
            "  (pipelined LRANGE + decode)",
            f"  the decision rule alone     {r['rule_only_per_s']:>10,} decisions/s",
            f"  service / raw read          {ratio:.3f}",
            f"  machine: {r['cores']} cores, load average {r['load_average_start']} at start, "
            f"{r['load_average_end']} at end",
        ]
    )


def main(args: argparse.Namespace) -> int:
    if args.runs < 1:
        print("error: --runs must be at least 1", file=sys.stderr)
        return 2
    started = machine()
    with tempfile.TemporaryDirectory(prefix="continuity-bench-") as tmp, deployment(Path(tmp), False) as d:
        d.scale("reconciliation", 1, {})
        result = asyncio.run(measure(d, args.runs))
    result.update(
        cores=started["cores"],
        load_average_start=started["load_average"],
        load_average_end=machine()["load_average"],
    )
    print(msgspec.json.encode(result).decode() if args.json else report(result))
    return 0
