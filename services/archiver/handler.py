"""One work item on `continuity.work.archive`: remote move, then local move, then the decision
(contract section 5).

Outcomes of a delivery: it returns (acknowledged), raises `Reject` for a work item that can
never be decoded (dead letter), or lets a Redis or NATS failure propagate (negative
acknowledgement, redelivery). A runner's failure is not transient: it is a decision.

Crash safety. Every step is recorded in Redis before the next one starts, and a redelivery
resumes from the record (see `store`):
- the decision slot `<attempt>:archive` is recorded: only the outbox is flushed;
- the remote move was never started: it is started now;
- it was started and its lease still runs: its sender may be alive, so this delivery waits
  for its result (or for the lease to end) instead of sending a second move;
- it was started, the lease ended and no result was recorded: the sender died while waiting.
  The move is not sent again; it counts as timed out with a detail saying the result is
  unknown (see `remote.unknown`);
- its result is recorded: the local move or the failure decision is made from it.
The local move and the decision `open_replacement` are one atomic script, and a decision slot
is written once, so two deliveries racing each other still make one decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

from shared.contract import subjects
from shared.contract.decisions import ArchiveWork, Decision
from shared.contract.decoding import InvalidInput, decode
from shared.contract.limits import MAX_EVENT_BYTES
from shared.contract.times import rfc3339_from_epoch
from shared.platform import metrics, tracing
from shared.platform.bus.consumer import Reject
from shared.platform.config import Config
from shared.platform.logs import Log
from shared.platform.redis import TRANSIENT_REDIS_ERRORS, Redis
from shared.records.outbox import Outbox, OutboxEntry
from shared.records.retention import Retention

from . import remote, step
from .step import MoveResult
from .store import ArchiveStore

log = Log("continuity.archiver")

POLL_S = 0.25
"""How often a delivery that waits on another's remote move looks at the progress again."""
_RESULT_WRITES = 5
_EPOCH_TRIES = 5

_decoder = msgspec.json.Decoder(ArchiveWork)
_decode_decision = msgspec.json.Decoder(Decision).decode


class EpochContention(Exception):
    """The session's epoch kept changing under the local move; a redelivery tries again."""


def lease_s(timeout_s: float) -> float:
    """How long a started remote move may still be in flight: the request's timeout plus a
    grace for its sender to record the answer (at most 5 s, less for short timeouts)."""
    return timeout_s + min(5.0, timeout_s)


class ArchiveHandler:
    def __init__(
        self,
        remote_nc: Callable[[], Awaitable[Client]],
        client: Redis,
        outbox: Outbox,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._remote_nc = remote_nc
        """The connection remote moves go out on (services/archiver/link.py)."""
        self._store = ArchiveStore(client, Retention.from_config(config))
        self._outbox = outbox
        self._timeout_s = config.archive_timeout_s
        self._backoff_s = config.retry_backoff_s
        # Tell JetStream well within its ack wait that the item is still being worked on.
        self._heartbeat_s = max(0.1, config.ack_wait_s / 3)
        self._clock = clock

    async def __call__(self, msg: Msg) -> None:
        try:
            work = decode(msg.data, _decoder, max_bytes=MAX_EVENT_BYTES)
        except InvalidInput as err:
            log.warning("work_rejected", reason=err.code)
            raise Reject(subjects.DEAD_INVALID, err.code) from None
        tracing.annotate(run_id=work.run_id, runner_id=work.runner_id, attempt=work.attempt)
        async with _keep_alive(msg, self._heartbeat_s):
            await self.archive(work)

    async def archive(self, work: ArchiveWork) -> None:
        started = time.perf_counter()
        await self._store.index_run(work)
        # The generation values to hide in the runner's output, read before the move starts:
        # a Redis failure here costs a redelivery, never the runner's answer.
        generations = await self._store.session_generations(work.session.key)
        state = await self._begin(work)
        if state == "decided":
            await self._finish_recorded(work, None)
            return
        if state == "send":
            answer = await remote.ask(await self._remote_nc(), work, self._timeout_s)
            generations |= await self._generations_now(work)
            result = await self._keep(work, answer.result(generations))
        elif state == "remote_started":
            log.warning("archive_result_unknown", run_id=work.run_id, archive_id=work.archive_id)
            result = await self._keep(work, remote.unknown())
        else:
            result = await self._store.load_result(work)
        if result.ok:
            await self._replace(work, result, started)
        else:
            await self._refuse(work, result, started)

    async def _begin(self, work: ArchiveWork) -> str:
        """Start the remote move, or wait while another delivery's move may be in flight."""
        lease = lease_s(self._timeout_s)
        while True:
            begin = await self._store.begin(work, lease, self._now())
            if begin.state != "remote_started" or begin.lease_left_s <= 0:
                return begin.state
            await asyncio.sleep(min(POLL_S, begin.lease_left_s))

    async def _generations_now(self, work: ArchiveWork) -> frozenset[str]:
        """Also hide a generation a commit stored while the runner was answering; best effort,
        because the answer is not recorded yet and `_keep` retries Redis on its own."""
        try:
            return await self._store.session_generations(work.session.key)
        except TRANSIENT_REDIS_ERRORS:
            return frozenset()

    async def _keep(self, work: ArchiveWork, result: MoveResult) -> MoveResult:
        """Record the move's result before acting on it; retried here, because a result lost
        to a short Redis outage could only be recovered as "unknown"."""
        for i in range(_RESULT_WRITES):
            try:
                if await self._store.record_result(work, result, self._now()):
                    return result
                # Another delivery recorded a result first (its sender's lease had ended):
                # act on that one, so that every delivery agrees.
                return await self._store.load_result(work)
            except TRANSIENT_REDIS_ERRORS:
                if i == _RESULT_WRITES - 1:
                    raise
                await asyncio.sleep(0.2 * 2**i)
        raise AssertionError("unreachable")

    async def _replace(self, work: ArchiveWork, result: MoveResult, started: float) -> None:
        """The local move and `open_replacement`, carrying the epoch the move sets."""
        sk = work.session.key
        for _ in range(_EPOCH_TRIES):
            epoch = await self._epoch(sk)
            chosen = step.replacement(work, result, epoch, self._clock())
            status, value = await self._store.record_local_move(
                work, chosen.step, epoch=epoch or 0, progress=chosen.progress
            )
            if status == "recorded":
                await self._published(work, chosen.decision, chosen.step.outbox[0], result, started)
                return
            if status == "duplicate":
                await self._finish_recorded(work, value)
                return
            if status == "session_held":
                await self._held(work, result, epoch, started)
                return
            # A commit changed the epoch between our read and the script: build it again.
        raise EpochContention(work.archive_id)

    async def _held(self, work: ArchiveWork, result: MoveResult, epoch: int | None, started: float) -> None:
        """The saved record is held for an operator: it is never archived (I5); the run stops
        for an operator as well."""
        log.warning(
            "archive_session_held", run_id=work.run_id, attempt=work.attempt, archive_id=work.archive_id
        )
        await self._record(work, step.held(work, epoch, self._clock()), result, started)

    async def _refuse(self, work: ArchiveWork, result: MoveResult, started: float) -> None:
        """A failed move: the local record stays as it is; retry while the budget lasts."""
        epoch = await self._epoch(work.session.key)
        chosen = step.refusal(work, result, epoch, self._clock(), backoff_s=self._backoff_s)
        await self._record(work, chosen, result, started)

    async def _record(
        self, work: ArchiveWork, chosen: step.ArchiveStep, result: MoveResult, started: float
    ) -> None:
        """Record a decision that leaves the session record as it is, then publish it (or, when
        an earlier delivery recorded one, finish that one)."""
        existing = await self._store.record_step(work, chosen.step)
        if existing is not None:
            await self._finish_recorded(work, existing)
            return
        decided = chosen.decision
        await self._store.mark_done(work, decided.decision_id, decided.decided_at)
        await self._published(work, decided, chosen.step.outbox[0], result, started)

    async def _published(
        self, work: ArchiveWork, decision: Decision, entry: OutboxEntry, result: MoveResult, started: float
    ) -> None:
        await self._outbox.flush(work.session.key, [entry])
        tracing.annotate(
            action=decision.action, reason=decision.reason, rule=decision.rule, archive=result.label
        )
        metrics.labelled(metrics.ARCHIVES, result.label).inc()
        metrics.observer(metrics.ARCHIVE_DURATION)(time.perf_counter() - started)
        metrics.labelled(metrics.DECISIONS, decision.action, decision.reason).inc()
        self._observe_latency(work)
        log.info(
            "archive_decided",
            runner_id=work.runner_id,
            run_id=work.run_id,
            attempt=work.attempt,
            archive_id=work.archive_id,
            result=result.label,
            action=decision.action,
            epoch=decision.epoch,
        )

    async def _finish_recorded(self, work: ArchiveWork, slot_value: bytes | None) -> None:
        """The decision is recorded: publish it if a crash stopped that (an outbox entry older than
        the outbox's grace period), and nothing else."""
        if slot_value is None:
            slot_value = await self._store.recorded_decision(work)
        if slot_value is None:
            return
        try:
            decided = _decode_decision(slot_value)
        except msgspec.MsgspecError:
            # Not ours to repair; the outbox sweeper publishes whatever is left.
            log.warning("slot_unreadable", run_id=work.run_id, attempt=work.attempt)
            return
        # Taken before it is published, as the classifier's copies and the sweeper take theirs: a
        # copy of the work handled while its recorder publishes sends nothing more.
        if await self._outbox.flush_leftovers(work.session.key, [decided.decision_id]):
            self._observe_latency(work)
            log.info("outbox_repaired", run_id=work.run_id, attempt=work.attempt)
        log.info("archive_duplicate", run_id=work.run_id, attempt=work.attempt, archive_id=work.archive_id)

    async def _epoch(self, sk: str) -> int | None:
        """The session's epoch, 0 for a record without one, None without a record."""
        return await self._store.epoch(sk)

    def _observe_latency(self, work: ArchiveWork) -> None:
        if work.event_published_at is not None:
            metrics.observer(metrics.DECISION_LATENCY)(max(0.0, time.time() - work.event_published_at))

    def _now(self) -> str:
        return rfc3339_from_epoch(self._clock())


@contextlib.asynccontextmanager
async def _keep_alive(msg: Msg, every_s: float) -> AsyncIterator[None]:
    """Send in-progress acknowledgements while the item is handled, so JetStream does not
    hand it to another replica while the runner is still answering."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(every_s)
            with contextlib.suppress(Exception):
                await msg.in_progress()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
