"""One event on `continuity.events.<runner_id>.<event_type>`: validate, authenticate, classify,
decide, record in one atomic step, publish (contract sections 4 and 7).

Outcomes of `handle`: it returns (the message is acknowledged), raises `Reject` (dead letter,
then acknowledged), or lets a Redis or NATS failure propagate (negative acknowledgement with a
delay, redelivery; the shared consumer moves it to `continuity.dead.exhausted` at the cap).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar, cast

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared.contract import subjects
from shared.contract.decisions import Decision
from shared.contract.decoding import InvalidInput, decode
from shared.contract.events import ResumeFailed, TurnCompleted
from shared.contract.limits import MAX_EVENT_BYTES
from shared.contract.tenancy import Refusal, RunnerRecord
from shared.contract.times import rfc3339_from_epoch
from shared.contract.types import ClassSource, FailureClass, QuotaKind, QuotaScope, RefusalCode
from shared.platform import metrics, tracing
from shared.platform.bus.ack_reply import stored_at, stream_seq
from shared.platform.bus.consumer import Reject
from shared.platform.bus.publish import publish
from shared.platform.config import Config
from shared.platform.logs import Log
from shared.platform.quotas import LeasedBuckets
from shared.platform.redis import Redis
from shared.policy import SHIPPED, Policy
from shared.records import keys, outcomes, quotas, steps
from shared.records import runners as identity
from shared.records.outbox import Outbox
from shared.records.retention import Retention
from shared.records.session import saved_session_of, text

from .step import SPENDING, Choice, SlotView, Unverified, announced_ids, choose, failure_class_of
from .store import ClassifierStore
from .stored_runs import Answer, StoredRuns
from .turns import Turns, authenticate

log = Log("continuity.classifier")

EVENT_TYPE = subjects.RESUME_FAILED
_TYPE_SUFFIX = "." + EVENT_TYPE
_TURN_SUFFIX = "." + subjects.TURN_COMPLETED

E = TypeVar("E", ResumeFailed, TurnCompleted)
_decoder = msgspec.json.Decoder(ResumeFailed)
_turn_decoder = msgspec.json.Decoder(TurnCompleted)
_decision = msgspec.json.Decoder(Decision)
_encode_refusal = msgspec.json.Encoder().encode

SPENT_READ_S = 1.0
"""How long a replica trusts the recovery count it last saw while the count is below
`SPENT_NEAR` of the budget: other replicas' additions of that second are seen a second late.
The count only guides the first choice; a retry or replacement takes its unit in one script
that refuses it past the budget (`_choose_within_budget`)."""
SPENT_NEAR = 0.8


NO_PRIOR: list[bytes | None] = [None, None, None]
"""The prior step of a run this event indexed: none."""

DECIDE_TRIES = 3
"""Reads and decisions of one event before a session that keeps changing counts as transient."""


@dataclass(frozen=True, slots=True)
class _Recorded:
    """A decision recorded by this delivery, and what its publication needs."""

    choice: Choice
    failure_class: FailureClass
    prior: list[bytes | None]
    """The run's last decision, status and harness before the step (`_count_decision`)."""
    published_at: float | None


class EventHandler:
    def __init__(
        self,
        client: Redis,
        outbox: Outbox,
        config: Config,
        *,
        js: JetStreamContext | None = None,
        clock: Callable[[], float] = time.time,
        policy: Policy = SHIPPED,
    ) -> None:
        self._policy = policy
        self._store = ClassifierStore(client, Retention.from_config(config))
        self._js = js
        self._directory = identity.RunnerDirectory(client, cache_s=config.runner_cache_s)
        self._enforced = config.tenancy == "enforced"
        # The event-rate buckets are shared in Redis; each replica leases tokens from them.
        self._runner_rate = _leased(client, config.runner_event_rate, config.runner_event_burst)
        self._tenant_rate = _leased(client, config.tenant_event_rate, config.tenant_event_burst)
        self._runner_runs = config.runner_stored_runs
        self._tenant_runs = config.tenant_stored_runs
        self.stored_runs = StoredRuns(client, Retention.from_config(config).run_ms)
        self._budget = config.tenant_recovery_budget
        self._spent_seen: dict[str, tuple[float, int]] = {}
        """Per budget key: when this replica last learnt the count, and the count."""
        self._window_s = config.tenant_recovery_window_s
        self._outbox = outbox
        self._keys = config.runner_keys
        self._backoff_s = config.retry_backoff_s
        self._clock = clock
        self._turns = Turns(self._store, outbox)

    async def __call__(self, msg: Msg) -> None:
        type_label = _type_label(msg.subject)
        try:
            outcome = await self._handle(msg)
        except Reject as rej:
            outcome = _OUTCOMES.get(rej.dead_subject, "invalid")
            metrics.adder(metrics.EVENTS, type_label, outcome)()
            seq = stream_seq(msg.reply)
            log.warning("event_rejected", reason=rej.reason, outcome=outcome, stream_seq=seq)
            raise
        except Exception:
            metrics.adder(metrics.EVENTS, type_label, "transient")()
            raise
        metrics.adder(metrics.EVENTS, type_label, outcome)()

    async def _handle(self, msg: Msg) -> str:
        """A `resume_failed`: admitted, classified, decided and recorded, then published (or a
        `turn_completed`, `_handle_turn`). Returns the event's outcome label."""
        if msg.subject.endswith(_TURN_SUFFIX):
            return await self._handle_turn(msg)
        event = _validated(msg, _decoder, _TYPE_SUFFIX)
        admitted = await self._admit(msg, event)
        if isinstance(admitted, str):
            return admitted
        record, now = admitted
        classified = failure_class_of(event, self._keys)
        if isinstance(classified, Unverified):
            raise Reject(subjects.DEAD_QUARANTINE, classified.reason)
        recorded = await self._decide_and_record(msg, event, record, classified, now)
        if isinstance(recorded, str):
            return recorded
        return await self._publish(event, recorded)

    async def _admit(
        self, msg: Msg, event: ResumeFailed | TurnCompleted
    ) -> tuple[RunnerRecord | None, float] | str:
        """The runner's directory record and the time, once the event may be handled: refused
        (dead letter, through `_refuse`) outside the runner's tenants, `quota_exceeded` over its
        event rate (10.5, 10.6)."""
        tracing.annotate(run_id=event.run_id, runner_id=event.runner_id, attempt=event.attempt)
        cached = self._directory.cached(event.runner_id)
        record = cached.record if cached is not None else await self._directory.get(event.runner_id)
        allowed = identity.access(record, event.session.tenant, enforced=self._enforced)
        if allowed is not identity.Access.ALLOWED:
            await self._refuse(msg, event, record, allowed.value)
        now = self._clock()
        over = await self._over_quota(event)
        if over is None:
            return record, now
        scope, wait_s = over
        identity.refused(event.runner_id, record, "quota_exceeded")
        await self._notify(
            msg, event, "quota_exceeded", scope=scope, quota="event_rate", not_before=now + wait_s
        )
        log.info("event_over_quota", runner_id=event.runner_id, run_id=event.run_id, scope=scope)
        return "quota_exceeded"

    async def _decide_and_record(
        self,
        msg: Msg,
        event: ResumeFailed,
        record: RunnerRecord | None,
        classified: tuple[FailureClass, ClassSource],
        now: float,
    ) -> _Recorded | str:
        """Read, decide and record in one atomic step, again while the session keeps changing:
        the recorded step, or `quota_exceeded` (stored runs), or `duplicate`."""
        sk = event.session.key
        published_at = stored_at(msg.reply)  # when JetStream stored the event
        budget_key = keys.recovery_budget(event.session.tenant, int(now // self._window_s))
        for tried in range(DECIDE_TRIES):
            counted, indexed, raw_session, prior, spent_count = await self._reads(
                event, budget_key, now, count=tried == 0 and event.attempt == 1
            )
            # A run with no step yet is counted (again: counting is idempotent), so a delivery
            # that stopped between claiming the run and counting it leaves no run uncounted.
            new_run = (indexed is None or not any(prior)) and indexed in (None, sk)
            if counted is not None and not new_run:
                await self.stored_runs.unsent(self._owners(event), event.run_id, counted)
            if indexed is not None and indexed != sk:
                # A run's slots live under its session's tag: an event naming another session for
                # the same run would find no slot there and decide the run a second time.
                raise Reject(subjects.DEAD_INVALID, "run_session_mismatch")
            if new_run and await self._over_stored_runs(msg, event, record, now, counted):
                return "quota_exceeded"
            choice, spending = await self._choose_within_budget(
                event, classified, raw_session, published_at, budget_key, spent_count, first=indexed is None
            )
            try:
                existing = await self._store.record(
                    sk, event.run_id, choice.step, index_fresh=indexed is None
                )
            except steps.SessionChanged:
                await self._give_back(budget_key, spending)
                continue  # a commit landed between the read and the recording: decide again
            except steps.NotOwned as refusal:
                await self._give_back(budget_key, spending)
                await self._refuse_not_owned(msg, event, record, refusal, fresh=indexed is None)
            if existing is not None:
                # The slot was taken by an earlier delivery: no second decision, and what it
                # recorded is published once, by that delivery or, after a crash stopped it
                # before its flush, by the first taker of its outbox entries.
                await self._give_back(budget_key, spending)
                await self._flush_leftovers(sk, event.run_id, event.attempt, existing)
                log.info("event_duplicate", run_id=event.run_id, attempt=event.attempt)
                return "duplicate"
            return _Recorded(choice, classified[0], prior, published_at)
        raise steps.SessionChanged(sk)  # a transient failure: the event is redelivered

    async def _reads(
        self, event: ResumeFailed, budget_key: str, now: float, *, count: bool
    ) -> tuple[Any, str | None, Any, Any, int]:
        """What a decision reads, in one round trip: the run's stored-runs count when `count`
        (a run's first report is almost always a new run: its count goes out with the reads
        instead of a round trip after them, taken back if not new), the run's index (claimed
        unless it is already), the session record, the run as it was (a later attempt's) and
        the tenant's recovery budget spent."""
        sk = event.session.key
        counting = (
            self.stored_runs.send(self._owners(event), event.run_id, int(now * 1000)) if count else None
        )
        claimed = self._store.claim_run(event.run_id, sk)
        session = self._store.saved_session(sk)
        before = self._store.run_before(sk, event.run_id) if event.attempt > 1 else None
        spent = self._spent(event.session.tenant, budget_key, now)
        counted = await counting if counting is not None else None  # its failures are answers
        indexed, raw_session = await claimed, await session
        if before is not None:
            prior = await before
        elif indexed is None:
            # A first report's prior step only tells whether a run already indexed is new
            # (nothing is counted as having followed a decision before attempt 1).
            prior = NO_PRIOR
        else:
            prior = await self._store.run_before(sk, event.run_id)
        spent_count = int((spent if isinstance(spent, int) else await spent) or 0)
        self._spent_seen[budget_key] = (now, spent_count)
        return counted, indexed, raw_session, prior, spent_count

    async def _refuse_not_owned(
        self, msg: Msg, event: ResumeFailed, record: RunnerRecord | None, refusal: steps.NotOwned, fresh: bool
    ) -> NoReturn:
        if fresh:
            # This event indexed the run a moment ago: leave no claim on the run_id, and no
            # count of it.
            await self._store.unclaim_run(event.run_id)
            await self.stored_runs.forget(self._owners(event), event.run_id)
        await self._refuse(msg, event, record, cast(RefusalCode, refusal.reason))

    async def _choose_within_budget(
        self,
        event: ResumeFailed,
        classified: tuple[FailureClass, ClassSource],
        raw_session: Any,
        published_at: float | None,
        budget_key: str,
        spent_count: int,
        *,
        first: bool,
    ) -> tuple[Choice, bool]:
        """The choice, and whether it took a unit of the tenant's recovery budget. A retry or a
        replacement takes its unit before it is recorded, in one script that refuses the unit
        once the budget is spent: replicas deciding at the same moment never pass the budget
        together, and an event that finds it spent meanwhile is decided again as spent."""
        budget_spent = spent_count >= self._budget
        window_ms = int(self._window_s * 2000)
        while True:
            choice = choose(
                event,
                classified,
                saved_session_of(raw_session),
                self._clock(),
                backoff_s=self._backoff_s,
                published_at=published_at,
                budget_spent=budget_spent,
                policy=self._policy,
            )
            choice.step.run_fields.update(run_extras(event, published_at, first=first))
            if choice.verdict not in SPENDING:
                return choice, False
            # A policy row may spend with the budget spent: it is counted all the same.
            move: quotas.BudgetMove = "force" if budget_spent else "take"
            taken, total = await quotas.recovery(self._store.redis, budget_key, move, self._budget, window_ms)
            self._spent_seen[budget_key] = (self._clock(), total)
            if taken:
                return choice, True
            budget_spent = True

    async def _give_back(self, budget_key: str, spending: bool) -> None:
        """Return the budget unit of a step that was not recorded (a redelivery finding its
        slot taken, a session that changed, a refusal): only recorded steps spend."""
        if spending:
            window_ms = int(self._window_s * 2000)
            _, total = await quotas.recovery(
                self._store.redis, budget_key, "give_back", self._budget, window_ms
            )
            self._spent_seen[budget_key] = (self._clock(), total)

    async def _over_stored_runs(
        self,
        msg: Msg,
        event: ResumeFailed,
        record: RunnerRecord | None,
        now: float,
        counted: list[Answer] | None = None,
    ) -> bool:
        """Whether the new run this event indexed is refused by its owners' stored runs (counted
        now, or `counted` already); if so, the claim on its run_id is withdrawn and the runner
        told when to send it again."""
        refused_by = await self.stored_runs.admit(self._owners(event), event.run_id, int(now * 1000), counted)
        if refused_by is None:
            return False
        await self._store.unclaim_run(event.run_id)  # leave no claim on the run_id
        scope, free_at = refused_by
        identity.refused(event.runner_id, record, "quota_exceeded")
        await self._notify(msg, event, "quota_exceeded", scope=scope, quota="stored_runs", not_before=free_at)
        log.info("event_over_quota", runner_id=event.runner_id, run_id=event.run_id, scope=scope)
        return True

    async def _publish(self, event: ResumeFailed, recorded: _Recorded) -> str:
        """Spend the budget, publish what the step recorded, count and log the decision."""
        choice, failure_class = recorded.choice, recorded.failure_class
        verdict, reason, rule = choice.verdict, choice.reason, choice.explanation.rule
        await self._outbox.flush(event.session.key, choice.step.outbox)
        metrics.adder(metrics.FAILURE_CLASSES, failure_class)()
        _count_decision(event, rule, failure_class, recorded.prior)
        tracing.annotate(failure_class=failure_class, action=verdict, reason=reason, rule=rule)
        log.info(
            "event_decided",
            runner_id=event.runner_id,
            run_id=event.run_id,
            attempt=event.attempt,
            failure_class=failure_class,
            action=verdict,
            reason=reason,
            rule=rule,
        )
        if verdict == "archive":
            return "archive_requested"
        metrics.adder(metrics.DECISIONS, verdict, reason)()
        if recorded.published_at is not None:
            metrics.observer(metrics.DECISION_LATENCY)(max(0.0, time.time() - recorded.published_at))
        return "decided"

    async def _handle_turn(self, msg: Msg) -> str:
        """A `turn_completed` (4.6): the same tenancy and rate checks as a failure, then its
        signed result, then the outcome recorded once on the runner's own run."""
        event = _validated(msg, _turn_decoder, _TURN_SUFFIX)
        admitted = await self._admit(msg, event)
        if isinstance(admitted, str):
            return admitted
        record, now = admitted
        authenticate(event, self._keys)
        published_at = stored_at(msg.reply)
        stored_ms = round(published_at * 1000) if published_at is not None else None
        try:
            outcome = await self._turns.record(event, stored_ms, now)
        except steps.NotOwned as refusal:
            await self._refuse(msg, event, record, cast(RefusalCode, refusal.reason))
        log.info("turn_" + outcome, runner_id=event.runner_id, run_id=event.run_id, attempt=event.attempt)
        return outcome

    def _spent(self, tenant: str, budget_key: str, now: float) -> int | Awaitable[Any]:
        """The tenant's recovery budget spent in this window: read from Redis at most every
        `SPENT_READ_S` while it is far from the budget (the count this replica saw last, its own
        additions included), and at every event once it is near."""
        seen = self._spent_seen.get(budget_key)
        if seen is not None and now - seen[0] < SPENT_READ_S and seen[1] < self._budget * SPENT_NEAR:
            return seen[1]
        if len(self._spent_seen) > 10_000:
            self._spent_seen.clear()
        return self._store.spent(budget_key)

    def _owners(self, event: ResumeFailed) -> tuple[tuple[QuotaScope, str, int], ...]:
        """The stored-runs owners of the event's run: its runner and its tenant, with limits."""
        return (
            ("runner", keys.runner_runs(event.runner_id), self._runner_runs),
            ("tenant", keys.tenant_runs(event.session.tenant), self._tenant_runs),
        )

    async def _over_quota(self, event: ResumeFailed | TurnCompleted) -> tuple[QuotaScope, float] | None:
        """The scope whose event rate the event exceeds, and how long until it may be sent."""
        for scope, buckets, key in (
            ("runner", self._runner_rate, keys.runner_event_rate(event.runner_id)),
            ("tenant", self._tenant_rate, keys.tenant_event_rate(event.session.tenant)),
        ):
            wait_s = buckets.take_now(key)
            if wait_s is None:  # one event in a lease's worth: lease again from Redis
                wait_s = await buckets.take(key)
            if wait_s > 0:
                return cast(QuotaScope, scope), wait_s
        return None

    async def _refuse(
        self, msg: Msg, event: ResumeFailed | TurnCompleted, record: RunnerRecord | None, code: RefusalCode
    ) -> NoReturn:
        """Tell the runner its event is refused, count it, and dead-letter the event."""
        identity.refused(event.runner_id, record, code)
        await self._notify(msg, event, code)
        raise Reject(subjects.DEAD_REFUSED, code)

    async def _notify(
        self,
        msg: Msg,
        event: ResumeFailed | TurnCompleted,
        code: RefusalCode,
        *,
        scope: QuotaScope | None = None,
        quota: QuotaKind | None = None,
        not_before: float | None = None,
    ) -> None:
        """A `refusal` on the runner's decisions subject (contract 10.5), de-duplicated by the
        event's stream sequence, so a redelivery tells the runner once."""
        if self._js is None:
            return
        now = self._clock()
        refusal = Refusal(
            runner_id=event.runner_id,
            run_id=event.run_id,
            attempt=event.attempt,
            event_id=event.event_id,
            code=code,
            scope=scope,
            quota=quota,
            # Rounded up to the millisecond: a report sent again at `not_before` finds its token.
            not_before=rfc3339_from_epoch(math.ceil(not_before * 1000) / 1000)
            if not_before is not None
            else None,
            refused_at=rfc3339_from_epoch(now),
        )
        seq = stream_seq(msg.reply)
        await publish(
            self._js,
            subjects.decisions(event.runner_id),
            _encode_refusal(refusal),
            f"refusal:{seq if seq is not None else event.event_id}",
        )

    async def _flush_leftovers(self, sk: str, run_id: str, attempt: int, existing: bytes) -> None:
        """Publish what the step in the slot announced and its recorder left unpublished; an
        entry younger than the outbox's grace period is left to its recorder, which is still
        publishing it (a copy of the report handled at the same time)."""
        try:
            slot = msgspec.json.decode(existing, type=SlotView)
        except msgspec.MsgspecError:
            # Not ours to repair here; the sweeper publishes any entry it finds.
            log.warning("slot_unreadable", run_id=run_id, attempt=attempt)
            return
        msg_ids = announced_ids(slot, run_id, attempt)
        if not msg_ids:
            return
        published = await self._outbox.flush_leftovers(sk, msg_ids)
        if published:
            log.info("outbox_repaired", run_id=run_id, attempt=attempt, count=published)


def _leased(client: Redis, rate: float, burst: int) -> LeasedBuckets:
    """Buckets of one rate and burst in Redis, leased by this replica."""

    async def lease(bucket: str, wanted: int) -> tuple[int, float]:
        return await quotas.lease(client, bucket, rate, burst, wanted)

    return LeasedBuckets(rate, burst, lease)


_OUTCOMES = {subjects.DEAD_QUARANTINE: "quarantined", subjects.DEAD_REFUSED: "refused"}
"""The `outcome` label of an event dead-lettered on each subject (any other: `invalid`)."""


def _validated(msg: Msg, decoder: msgspec.json.Decoder[E], type_suffix: str) -> E:
    """The event of `msg`, decoded by its type's decoder, sent on its own runner's subject of
    that type; else a dead letter with the reason."""
    runner = subjects.runner_of_event_subject(msg.subject)
    if runner is None:
        raise Reject(subjects.DEAD_INVALID, "invalid_subject")
    if not msg.subject.endswith(type_suffix):  # the subject's last token, of four
        raise Reject(subjects.DEAD_INVALID, "unsupported_event_type")
    try:
        event = decode(msg.data, decoder, max_bytes=MAX_EVENT_BYTES)
    except InvalidInput as err:
        raise Reject(subjects.DEAD_INVALID, err.code) from None
    if event.runner_id != runner:
        raise Reject(subjects.DEAD_INVALID, "runner_mismatch")
    return event


def _type_label(subject: str) -> str:
    """A closed metric label: runners choose subject tokens, so unknown types share one."""
    if subject.endswith(_TYPE_SUFFIX):
        return EVENT_TYPE
    return subjects.TURN_COMPLETED if subject.endswith(_TURN_SUFFIX) else "other"


def run_extras(event: ResumeFailed, published_at: float | None, *, first: bool) -> dict[str, str]:
    """The run record's fields for the outcome statistics (4.6): the harness the runner named,
    and, on the run's first event, when JetStream stored it (the start of its recovery)."""
    extras: dict[str, str] = {}
    if event.harness is not None:
        extras[outcomes.HARNESS_FIELD] = event.harness.name
        extras[outcomes.HARNESS_VERSION_FIELD] = event.harness.version or ""
    if first and published_at is not None:
        extras[outcomes.FIRST_FAILED_FIELD] = str(round(published_at * 1000))
    return extras


def _count_decision(event: ResumeFailed, rule: str, failure_class: str, prior: list[bytes | None]) -> None:
    """Count a recorded decision by its row (4.6), and the run's previous decision as `failed`
    when it was waiting for a turn: this failure is what followed it."""
    harness = outcomes.harness_label(event.harness.name if event.harness is not None else None)
    metrics.adder(metrics.RECOVERY_DECISIONS, rule, failure_class, harness)()
    last, status, prior_harness = prior
    if not last or text(status) not in outcomes.ABANDONABLE:
        return
    try:
        previous = _decision.decode(last)
    except msgspec.MsgspecError:
        return
    if previous.attempt < event.attempt and previous.action in outcomes.RECOVERED_BY_ACTION:
        metrics.adder(
            metrics.RUN_OUTCOMES,
            previous.rule or "operator",
            previous.failure_class or "none",
            outcomes.harness_label(text(prior_harness) or None),
            "failed",
        )()
