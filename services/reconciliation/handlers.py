"""The reconciliation service's handlers (contract section 6): the `reconcile` work items, the
operator's requests, and the gauges of open reconciliations.

A `continue_fresh` is recorded with its outbox entry in one atomic script, then published; if
the process dies in between, the outbox sweeper publishes it, and the stream's duplicate window
drops a second publication of the same id.
"""

from __future__ import annotations

import asyncio
import contextlib

from shared.contract.decisions import ReconcileWork
from shared.contract.errors import (
    EXECUTION_RECONCILIATION_ALREADY_DELIVERED,
    EXECUTION_RECONCILIATION_CONFLICT,
    INVALID_FIELD,
    NOT_FOUND,
    OPERATOR_RETRY_ALREADY_DELIVERED,
    RECONCILIATION_REQUIRED,
    RUN_CHANGED,
    RUN_NOT_STOPPED,
)
from shared.contract.reconciliation import (
    DeliveredReply,
    ListReply,
    ListRequest,
    ReconciliationRecord,
    ResolveRequest,
    RetryRequest,
    RunRequest,
    RunView,
)
from shared.platform import metrics, tracing
from shared.platform.logs import Log
from shared.records.outbox import Outbox

from . import wire
from .cursor import BadCursor
from .legacy import move_legacy
from .runs_index import RunsIndex
from .step import Continuation
from .store import ReconciliationStore

log = Log("continuity.reconciliation")


class ReconciliationHandlers:
    def __init__(
        self,
        store: ReconciliationStore,
        outbox: Outbox,
        *,
        gauge_interval_s: float = 10.0,
        runs: RunsIndex | None = None,
    ) -> None:
        self.store = store
        self.runs = runs
        self._outbox = outbox
        self._gauge_interval_s = gauge_interval_s
        self._refresh = asyncio.Event()

    # Work items ---------------------------------------------------------------------------

    async def open(self, work: ReconcileWork) -> None:
        """Open the record and index it; returning acknowledges, raising redelivers."""
        tracing.annotate(run_id=work.run_id, runner_id=work.runner_id, attempt=work.attempt)
        code = await self.store.open(work)
        log.info("reconciliation_opened", run_id=work.run_id, attempt=work.attempt, result=code)
        self._refresh.set()

    # Requests -----------------------------------------------------------------------------

    async def list(self, req: ListRequest) -> ListReply:
        try:
            items, next_cursor = await self.store.records(req.status, req.limit, req.cursor)
        except BadCursor:
            raise INVALID_FIELD.error("`cursor` is not a cursor of this list") from None
        return ListReply(items=items, next_cursor=next_cursor)

    async def get(self, req: RunRequest) -> ReconciliationRecord:
        found = await self.store.load(req.run_id)
        if found is None:
            raise NOT_FOUND.error("no reconciliation record for this run")
        return found[1]

    async def run(self, req: RunRequest) -> RunView:
        found = await self.store.load_run(req.run_id)
        if found is None:
            raise NOT_FOUND.error("no such run")
        return found[1]

    async def audit(self, req: RunRequest) -> wire.AuditReply:
        items = await self.store.audit(req.run_id)
        if items is None:
            raise NOT_FOUND.error("no such run")
        return wire.AuditReply(run_id=req.run_id, items=items)

    async def resolve(self, req: ResolveRequest) -> DeliveredReply:
        found = await self.store.load_traced(req.run_id)
        if found is None:
            raise NOT_FOUND.error("no reconciliation record for this run")
        sk, record, trace = found
        with tracing.span(
            "continuity-reconciliation deliver",
            parent=trace,
            link_current=True,  # the operator's request
            run_id=record.run_id,
            attempt=record.attempt,
        ):
            return await self._resolved(req, sk, record)

    async def _resolved(self, req: ResolveRequest, sk: str, record: ReconciliationRecord) -> DeliveredReply:
        step = await self.store.record_resolution(sk, record, req.action_outcome, req.evidence, req.actor)
        if step.code == "not_found":
            raise NOT_FOUND.error("no reconciliation record for this run")
        if step.code == "already_delivered":
            raise EXECUTION_RECONCILIATION_ALREADY_DELIVERED.error()
        if step.code in ("conflict", "slot_taken"):
            raise EXECUTION_RECONCILIATION_CONFLICT.error()
        if step.code == "changed":
            raise RUN_CHANGED.error("the reconciliation changed while this request was handled")
        await self._deliver(step, kind="resolve")
        await self._forget_open(sk, record.run_id)
        log.info(
            "reconciliation_resolved",
            run_id=record.run_id,
            attempt=record.attempt,
            outcome=req.action_outcome,
        )
        return DeliveredReply(status="delivered", decision_id=step.decision.decision_id)

    async def retry(self, req: RetryRequest) -> DeliveredReply:
        with tracing.span(
            "continuity-reconciliation retry",
            parent=await self.store.run_trace(req.run_id),
            link_current=True,  # the operator's request
            run_id=req.run_id,
        ):
            return await self._retried(req)

    async def _retried(self, req: RetryRequest) -> DeliveredReply:
        # Read, then check and record atomically; a run that moved on in between (another
        # attempt) is read once more.
        for _ in range(2):
            found = await self.store.load_run(req.run_id)
            if found is None:
                raise NOT_FOUND.error("no such run")
            sk, run = found
            step = await self.store.record_retry(sk, run, req.actor)
            if step.code != "changed":
                break
        if step.code == "not_found":
            raise NOT_FOUND.error("no such run")
        if step.code == "reconciliation_required":
            raise RECONCILIATION_REQUIRED.error()
        if step.code == "already_delivered":
            raise OPERATOR_RETRY_ALREADY_DELIVERED.error()
        if step.code == "not_stopped":
            raise RUN_NOT_STOPPED.error(f"{RUN_NOT_STOPPED.message} (status {step.detail})")
        if step.code == "changed":
            raise RUN_CHANGED.error()
        await self._deliver(step, kind="retry")
        log.info("operator_retry", run_id=run.run_id, attempt=run.attempt)
        return DeliveredReply(status="delivered", decision_id=step.decision.decision_id)

    # Helpers ------------------------------------------------------------------------------

    async def _deliver(self, step: Continuation, *, kind: str) -> None:
        """Publish a recorded decision. It is recorded already, so a failure here is not the
        requester's: the sweeper publishes it, and the reply still says delivered."""
        metrics.labelled(metrics.DECISIONS, step.decision.action, step.decision.reason).inc()
        try:
            await self._outbox.flush(step.session_key, step.outbox)
        except Exception as exc:
            log.warning("decision_publish_deferred", kind=kind, error_type=type(exc).__name__)

    async def _forget_open(self, sk: str, run_id: str) -> None:
        try:
            await self.store.drop_from_open(sk, run_id)
        except Exception as exc:  # the gauge refresher prunes what is left
            log.warning("open_index_update_deferred", error_type=type(exc).__name__)
        self._refresh.set()

    async def move_legacy(self, stop: asyncio.Event) -> None:
        """Move an earlier release's listing into the buckets, once; tried again while Redis is
        away, until the drain."""
        delay = 0.2
        while not stop.is_set():
            try:
                moved = await move_legacy(self.store)
            except Exception as exc:
                log.warning("legacy_listing_move_failed", error_type=type(exc).__name__, retry_in_s=delay)
                await _sleep(stop, delay)
                delay = min(delay * 2, 5.0)
                continue
            if moved:
                log.info("legacy_listing_moved", count=moved)
            return

    async def refresh_gauges(self, stop: asyncio.Event) -> None:
        """Keeps the open-reconciliation gauges current, refreshed at once after a change, and
        trims the listing and the runs index of runs whose records expired. An earlier
        release's listing is moved first (`move_legacy`)."""
        await self.move_legacy(stop)
        while not stop.is_set():
            try:
                await self.store.trim()
                count, oldest = await self.store.open_summary()
                metrics.RECONCILIATIONS_OPEN.set(count)
                metrics.RECONCILIATION_OLDEST_OPEN.set(oldest)
            except Exception as exc:  # Redis away: keep the last values, try again next round
                log.warning("gauge_refresh_failed", error_type=type(exc).__name__)
            if self.runs is not None:
                try:
                    await self.runs.trim()
                except Exception as exc:  # Redis away: the next round goes on
                    log.warning("runs_index_trim_failed", error_type=type(exc).__name__)
            # Until the interval is over, the records changed, or the drain began.
            wake = [asyncio.ensure_future(self._refresh.wait()), asyncio.ensure_future(stop.wait())]
            await asyncio.wait(wake, timeout=self._gauge_interval_s, return_when=asyncio.FIRST_COMPLETED)
            for waiter in wake:
                waiter.cancel()
            self._refresh.clear()


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    """Wait `seconds`, or less when the drain begins."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
