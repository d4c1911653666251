"""The reconciliation service (contract section 6): opens a record for every `reconcile` work
item, answers the operator's requests, and publishes `continue_fresh` decisions (the handlers
are in handlers.py)."""

from __future__ import annotations

import functools

from nats.aio.msg import Msg

from shared.contract import subjects
from shared.contract.decisions import ReconcileWork
from shared.contract.limits import MAX_REPLAY_REQUEST_BYTES
from shared.contract.policy import ReplayReply, ReplayRequest
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
from shared.contract.runs import RunsListReply, RunsListRequest, RunsStatsReply, RunsStatsRequest
from shared.platform.bus.streams import history_stream_config
from shared.platform.parts import Task
from shared.platform.runtime import Context
from shared.platform.service import ConsumerSpec, EndpointSpec, ServiceSpec, Wiring
from shared.policy.configured import configured_policy
from shared.records.outbox import Outbox
from shared.records.retention import Retention

from . import wire
from .handlers import ReconciliationHandlers
from .history import History
from .outcomes import Abandonment, runs_stats
from .replay import replay_runs
from .runs_index import RunsIndex
from .store import ReconciliationStore

NAME = "reconciliation"
VERSION = "1.0.0"


RECONCILIATIONS_LIST = EndpointSpec(
    "reconciliations-list", subjects.RECONCILIATIONS_LIST, ListRequest, ListReply
)
RECONCILIATIONS_GET = EndpointSpec(
    "reconciliations-get", subjects.RECONCILIATIONS_GET, RunRequest, ReconciliationRecord
)
RECONCILIATIONS_RESOLVE = EndpointSpec(
    "reconciliations-resolve", subjects.RECONCILIATIONS_RESOLVE, ResolveRequest, DeliveredReply
)
RUNS_GET = EndpointSpec("runs-get", subjects.RUNS_GET, RunRequest, RunView)
RUNS_AUDIT = EndpointSpec("runs-audit", wire.RUNS_AUDIT, RunRequest, wire.AuditReply)
OPERATOR_RETRY = EndpointSpec("operator-retry", subjects.OPERATOR_RETRY, RetryRequest, DeliveredReply)
RUNS_LIST = EndpointSpec("runs-list", subjects.RUNS_LIST, RunsListRequest, RunsListReply)
RUNS_STATS = EndpointSpec("runs-stats", subjects.RUNS_STATS, RunsStatsRequest, RunsStatsReply)
POLICY_REPLAY = EndpointSpec(
    "policy-replay",
    subjects.POLICY_REPLAY,
    ReplayRequest,
    ReplayReply,
    max_bytes=MAX_REPLAY_REQUEST_BYTES,
)
RECONCILE_WORK = ConsumerSpec(
    subjects.WORK_STREAM, subjects.RECONCILIATION_CONSUMER, subjects.WORK_RECONCILE, ReconcileWork
)
# The runs index follows every decision, whoever published it (runs_index.py); it skips what is
# not a decision itself, so it takes the raw message.
RUNS_INDEX = ConsumerSpec(
    subjects.DECISIONS_STREAM, subjects.RUNS_INDEX_CONSUMER, subjects.DECISIONS_ALL, Msg
)

SPEC = ServiceSpec(
    name=NAME,
    version=VERSION,
    description="Reconciliation records, operator resolve and retry",
    endpoints=(
        RECONCILIATIONS_LIST,
        RECONCILIATIONS_GET,
        RECONCILIATIONS_RESOLVE,
        RUNS_GET,
        RUNS_AUDIT,
        OPERATOR_RETRY,
        RUNS_LIST,
        RUNS_STATS,
        POLICY_REPLAY,
    ),
    consumers=(RECONCILE_WORK, RUNS_INDEX),
    streams=(history_stream_config,),  # finished runs (contract 9.14)
)


def build(
    ctx: Context,
    *,
    gauge_interval_s: float = 10.0,
    outbox_grace_s: float = 5.0,
    sweep_interval_s: float = 2.0,
) -> Wiring:
    outbox = Outbox(ctx.redis, ctx.js, grace_s=outbox_grace_s)
    retention = Retention.from_config(ctx.config)
    history = History(ctx.redis, ctx.js, ctx.config)
    store = ReconciliationStore(ctx.redis, retention, history)
    runs = RunsIndex(ctx.redis, retention, history)
    abandonment = Abandonment(runs, outbox, ctx.config.outcome_wait_s)
    h = ReconciliationHandlers(store, outbox, gauge_interval_s=gauge_interval_s, runs=runs)
    return Wiring(
        handlers={
            RECONCILIATIONS_LIST: h.list,
            RECONCILIATIONS_GET: h.get,
            RECONCILIATIONS_RESOLVE: h.resolve,
            RUNS_GET: h.run,
            RUNS_AUDIT: h.audit,
            OPERATOR_RETRY: h.retry,
            RUNS_LIST: runs.list_runs,
            RUNS_STATS: functools.partial(runs_stats, runs, ctx.redis, history=history),
            POLICY_REPLAY: functools.partial(
                replay_runs, runs, ctx.redis, configured_policy(ctx.config), history=history
            ),
            RECONCILE_WORK: h.open,
            RUNS_INDEX: runs.handle,
        },
        parts=(
            outbox.sweeper(sweep_interval_s),
            Task(h.refresh_gauges, name="reconciliation-gauges"),
            Task(abandonment.run, name="abandonment"),
        ),
    )
