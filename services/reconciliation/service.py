"""The reconciliation service (contract section 6): opens a record for every `reconcile` work
item, answers the operator's requests, and publishes `continue_fresh` decisions.

A `continue_fresh` is recorded with its outbox entry in one atomic script, then published; if
the process dies in between, the outbox sweeper running here (or in any other service)
publishes it, and the stream's duplicate window drops a second publication of the same id.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from nats.aio.msg import Msg

from shared import metrics, subjects
from shared.bus.consumer import PullConsumer, Reject
from shared.bus.endpoints import Endpoints
from shared.contracts.decisions import ReconcileWork
from shared.contracts.errors import ServiceError, conflict, not_found
from shared.contracts.limits import MAX_EVENT_BYTES
from shared.contracts.reconciliation import (
    DeliveredReply,
    ListReply,
    ListRequest,
    ReconciliationRecord,
    ResolveRequest,
    RetryRequest,
    RunRequest,
    RunView,
)
from shared.decoding import InvalidInput, decode
from shared.logs import Log
from shared.outbox import Outbox, Sweeper
from shared.runs.retention import Retention
from shared.runtime import Context

from . import wire
from .store import BadCursor, Continuation, ReconciliationStore

VERSION = "1.0.0"
log = Log("continuity.reconciliation")
_work_decoder = msgspec.json.Decoder(ReconcileWork)

RECONCILIATION_CONFLICT = "execution_reconciliation_conflict"
RECONCILIATION_ALREADY_DELIVERED = "execution_reconciliation_already_delivered"
RECONCILIATION_REQUIRED = "reconciliation_required"


class ReconciliationApp:
    name = "reconciliation"

    def __init__(
        self, *, gauge_interval_s: float = 10.0, outbox_grace_s: float = 5.0, sweep_interval_s: float = 2.0
    ) -> None:
        self._gauge_interval_s = gauge_interval_s
        self._outbox_grace_s = outbox_grace_s
        self._sweep_interval_s = sweep_interval_s
        self._store: ReconciliationStore | None = None
        self._outbox: Outbox | None = None
        self._endpoints: Endpoints | None = None
        self._consumer: PullConsumer | None = None
        self._sweeper: Sweeper | None = None
        self._stop = asyncio.Event()
        self._refresh = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # Life ---------------------------------------------------------------------------------

    async def start(self, ctx: Context) -> None:
        self._store = ReconciliationStore(ctx.redis, Retention.from_config(ctx.config))
        self._outbox = Outbox(ctx.redis, ctx.js, grace_s=self._outbox_grace_s)
        ep = Endpoints(
            ctx.nc,
            "continuity-reconciliation",
            VERSION,
            "Reconciliation records, operator resolve and retry",
            ctx.config.request_concurrency,
            reply_prefixes=ctx.config.reply_prefixes,
        )
        ep.add("reconciliations-list", subjects.RECONCILIATIONS_LIST, ListRequest, self.list)
        ep.add("reconciliations-get", subjects.RECONCILIATIONS_GET, RunRequest, self.get)
        ep.add("reconciliations-resolve", subjects.RECONCILIATIONS_RESOLVE, ResolveRequest, self.resolve)
        ep.add("runs-get", subjects.RUNS_GET, RunRequest, self.run)
        ep.add("runs-audit", wire.RUNS_AUDIT, RunRequest, self.audit)
        ep.add("operator-retry", subjects.OPERATOR_RETRY, RetryRequest, self.retry)
        await ep.start()
        self._endpoints = ep
        self._consumer = PullConsumer.from_config(
            ctx.js,
            ctx.config,
            stream=subjects.WORK_STREAM,
            durable=subjects.RECONCILIATION_CONSUMER,
            filter_subject=subjects.WORK_RECONCILE,
            handler=self.handle_work,
            service=self.name,
        )
        await self._consumer.start()
        self._sweeper = Sweeper(self._outbox, self._sweep_interval_s)
        self._sweeper.start()
        self._tasks = [asyncio.create_task(self._refresh_gauges())]

    async def drain(self, timeout: float) -> None:
        if self._consumer is not None:
            await self._consumer.drain(timeout)
        if self._endpoints is not None:
            await self._endpoints.drain(timeout)
        if self._sweeper is not None:
            await self._sweeper.stop(timeout)
        self._stop.set()
        self._refresh.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout)

    def ready(self) -> bool:
        return self._endpoints is not None and self._consumer is not None and self._consumer.bound

    @property
    def store(self) -> ReconciliationStore:
        assert self._store is not None
        return self._store

    # Work items ---------------------------------------------------------------------------

    async def handle_work(self, msg: Msg) -> None:
        """Open the record and index it; returning acknowledges, raising redelivers."""
        try:
            work = decode(msg.data, _work_decoder, max_bytes=MAX_EVENT_BYTES)
        except InvalidInput as err:
            raise Reject(subjects.DEAD_INVALID, err.code) from None
        code = await self.store.open(work)
        log.info("reconciliation_opened", run_id=work.run_id, attempt=work.attempt, result=code)
        self._refresh.set()

    # Requests -----------------------------------------------------------------------------

    async def list(self, req: ListRequest) -> ListReply:
        try:
            items, next_cursor = await self.store.records(req.status, req.limit, req.cursor)
        except BadCursor:
            raise ServiceError(400, "invalid_field", "`cursor` is not a cursor of this list") from None
        return ListReply(items=items, next_cursor=next_cursor)

    async def get(self, req: RunRequest) -> ReconciliationRecord:
        found = await self.store.load(req.run_id)
        if found is None:
            raise not_found("no reconciliation record for this run")
        return found[1]

    async def run(self, req: RunRequest) -> RunView:
        found = await self.store.load_run(req.run_id)
        if found is None:
            raise not_found("no such run")
        return found[1]

    async def audit(self, req: RunRequest) -> wire.AuditReply:
        items = await self.store.audit(req.run_id)
        if items is None:
            raise not_found("no such run")
        return wire.AuditReply(run_id=req.run_id, items=items)

    async def resolve(self, req: ResolveRequest) -> DeliveredReply:
        found = await self.store.load(req.run_id)
        if found is None:
            raise not_found("no reconciliation record for this run")
        sk, record = found
        step = await self.store.record_resolution(sk, record, req.action_outcome, req.evidence, req.actor)
        if step.code == "not_found":
            raise not_found("no reconciliation record for this run")
        if step.code == "already_delivered":
            raise conflict(
                RECONCILIATION_ALREADY_DELIVERED,
                "this resolution was already recorded and its decision delivered",
            )
        if step.code in ("conflict", "slot_taken"):
            raise conflict(
                RECONCILIATION_CONFLICT, "the reconciliation was already resolved with another outcome"
            )
        if step.code == "changed":
            raise conflict(wire.RUN_CHANGED, "the reconciliation changed while this request was handled")
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
        # Read, then check and record atomically; a run that moved on in between (another
        # attempt) is read once more.
        for _ in range(2):
            found = await self.store.load_run(req.run_id)
            if found is None:
                raise not_found("no such run")
            sk, run = found
            step = await self.store.record_retry(sk, run, req.actor)
            if step.code != "changed":
                break
        if step.code == "not_found":
            raise not_found("no such run")
        if step.code == "reconciliation_required":
            raise conflict(
                RECONCILIATION_REQUIRED,
                "the run waits on a reconciliation: resolve it instead of retrying",
            )
        if step.code == "already_delivered":
            raise conflict(
                wire.OPERATOR_RETRY_ALREADY_DELIVERED,
                "a fresh continuation was already delivered for this attempt of the run",
            )
        if step.code == "not_stopped":
            raise conflict(
                wire.RUN_NOT_STOPPED, f"the run is not stopped for an operator (status {step.detail})"
            )
        if step.code == "changed":
            raise conflict(wire.RUN_CHANGED, "the run changed while this request was handled")
        await self._deliver(step, kind="retry")
        log.info("operator_retry", run_id=run.run_id, attempt=run.attempt)
        return DeliveredReply(status="delivered", decision_id=step.decision.decision_id)

    # Helpers ------------------------------------------------------------------------------

    async def _deliver(self, step: Continuation, *, kind: str) -> None:
        """Publish a recorded decision. It is recorded already, so a failure here is not the
        requester's: the sweeper publishes it, and the reply still says delivered."""
        assert self._outbox is not None
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

    async def _refresh_gauges(self) -> None:
        while not self._stop.is_set():
            try:
                # Listing entries of an earlier release's single sets, then the expired ones.
                await self.store.move_legacy()
                await self.store.trim()
                count, oldest = await self.store.open_summary()
                metrics.RECONCILIATIONS_OPEN.set(count)
                metrics.RECONCILIATION_OLDEST_OPEN.set(oldest)
            except Exception as exc:  # Redis away: keep the last values, try again next round
                log.warning("gauge_refresh_failed", error_type=type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._refresh.wait(), self._gauge_interval_s)
            self._refresh.clear()
