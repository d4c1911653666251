"""The simulated operator: it retries runs stopped with `operator` (`continuity.operator.retry`)
and resolves the open reconciliations of the simulation's runs, as it finds them in
`continuity.reconciliations.list`. Each reply is held against contract section 6; a resolution
is re-sent, with the same and with another outcome, to check both conflicts.

Records of runs this simulation did not start are left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from dataclasses import dataclass

import nats.errors

from continuity.tools.simulate.checker import Checker
from shared.contract import ListRequest, ReconciliationRecord, ResolveRequest, RetryRequest
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.types import ActionOutcome, RecordedOutcome

ACTOR = "sim-operator"
OUTCOMES: tuple[ActionOutcome, ...] = ("completed", "not_performed", "mixed")


@dataclass(slots=True)
class _Waiting:
    runner_id: str
    attempt: int
    recorded: RecordedOutcome | None
    done: asyncio.Future[str]


class SimOperator:
    def __init__(
        self,
        client: ContinuityClient,
        checker: Checker,
        rng: random.Random,
        *,
        poll_s: float = 0.2,
        wait_s: float = 30.0,
        acting: bool = True,
    ) -> None:
        self._client = client
        self._checker = checker
        self._rng = rng
        self._poll_s = poll_s
        self._wait_s = wait_s
        self._acting = acting
        self._waiting: dict[str, _Waiting] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.present = False
        self.acts: Counter[str] = Counter()

    async def probe(self) -> bool:
        """Whether the reconciliation endpoints answer at all. Not acting, the operator is
        absent even when they do: stopped runs stay stopped for a person to handle."""
        try:
            await self._client.reconciliations(ListRequest(status="open", limit=1))
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            answered = False
        else:
            answered = True
        self.present = answered and self._acting
        return answered

    async def run(self, stop: asyncio.Event) -> None:
        """Poll the open reconciliations and resolve the simulation's, until `stop`."""
        while not stop.is_set():
            if self._waiting:
                with contextlib.suppress(RequestError, nats.errors.Error, TimeoutError):
                    listed = await self._client.reconciliations(ListRequest(status="open", limit=1000))
                    for record in listed.items:
                        waiting = self._waiting.pop(record.run_id, None)
                        if waiting is not None:
                            task = asyncio.create_task(self._resolve(record, waiting))
                            self._tasks.add(task)
                            task.add_done_callback(self._tasks.discard)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._poll_s)

    async def handle(
        self, run_id: str, runner_id: str, attempt: int, action: str, recorded: RecordedOutcome | None
    ) -> str | None:
        """Act on a run stopped with `operator` or `reconcile`; the story's step, or None when
        no reconciliation service answers."""
        if not self.present:
            return None
        try:
            view = await self._client.run(run_id)
        except RequestError as err:
            self._checker.note(run_id, f"runs.get after {action} answered {err.code}")
        else:
            want = "operator" if action == "operator" else "reconciling"
            last = view.last_decision.action if view.last_decision else None
            if (view.status, view.attempt, last) != (want, attempt, action):
                self._checker.note(
                    run_id,
                    f"runs.get after {action}: status {view.status}, attempt {view.attempt}, last {last}; "
                    f"expected {want}, {attempt}, {action}",
                )
        if action == "operator":
            return await self._retry(run_id, attempt)
        # A run waiting on a reconciliation gets no generic retry.
        try:
            await self._client.retry(RetryRequest(run_id=run_id, actor=ACTOR))
        except RequestError as err:
            if err.code != "reconciliation_required":
                self._checker.note(run_id, f"retry of a reconciling run answered {err.code}")
        else:
            self._checker.note(run_id, "retry of a run waiting on a reconciliation was accepted")
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting[run_id] = _Waiting(runner_id, attempt, recorded, done)
        try:
            return await asyncio.wait_for(done, self._wait_s)
        except TimeoutError:
            self._waiting.pop(run_id, None)
            self._checker.note(run_id, "the reconciliation record never appeared in reconciliations.list")
            return "reconciliation never listed"

    async def _retry(self, run_id: str, attempt: int) -> str:
        self._checker.operator_acting(run_id, attempt, "retry", None)
        try:
            reply = await self._client.retry(RetryRequest(run_id=run_id, actor=ACTOR))
        except RequestError as err:
            self._checker.operator_failed(run_id, attempt)
            self._checker.note(run_id, f"operator retry of a stopped run answered {err.code}")
            return f"operator retry refused ({err.code})"
        self.acts["retry"] += 1
        if reply.decision_id != f"{run_id}:{attempt}:continue_fresh":
            self._checker.note(run_id, f"operator retry delivered {reply.decision_id}")
        return "operator retry"

    async def _resolve(self, record: ReconciliationRecord, waiting: _Waiting) -> None:
        run_id = record.run_id
        try:
            step = await self._resolve_checked(record, waiting)
        except (nats.errors.Error, TimeoutError) as exc:
            step = f"resolve failed ({type(exc).__name__})"
            self._checker.note(run_id, f"resolve failed: {type(exc).__name__}")
        if not waiting.done.done():
            waiting.done.set_result(step)

    async def _resolve_checked(self, record: ReconciliationRecord, waiting: _Waiting) -> str:
        run_id = record.run_id
        if (record.runner_id, record.attempt, record.recorded_outcome) != (
            waiting.runner_id,
            waiting.attempt,
            waiting.recorded,
        ):
            self._checker.note(
                run_id,
                f"reconciliation record says runner {record.runner_id}, attempt {record.attempt}, "
                f"recorded {record.recorded_outcome}; the runner sent {waiting.runner_id}, "
                f"{waiting.attempt}, {waiting.recorded}",
            )
        if record.tool_call is None or record.tool_call.tool_call_id != f"tc-{run_id}":
            self._checker.note(run_id, "the reconciliation record lost the pending tool call")
        outcome: ActionOutcome = waiting.recorded if waiting.recorded else self._rng.choice(OUTCOMES)
        evidence = f"checked the tool's own log for tc-{run_id}: {outcome}"
        request = ResolveRequest(run_id=run_id, action_outcome=outcome, evidence=evidence, actor=ACTOR)
        self._checker.operator_acting(run_id, waiting.attempt, "resolve", outcome)
        try:
            reply = await self._client.resolve(request)
        except RequestError as err:
            self._checker.operator_failed(run_id, waiting.attempt)
            self._checker.note(run_id, f"resolve of an open reconciliation answered {err.code}")
            return f"resolve refused ({err.code})"
        self.acts["resolve"] += 1
        if (reply.status, reply.decision_id) != ("delivered", f"{run_id}:{waiting.attempt}:continue_fresh"):
            self._checker.note(run_id, f"resolve answered {reply.status} {reply.decision_id}")
        # The same resolution again, then another outcome: both conflicts of section 6.
        other = next(o for o in OUTCOMES if o != outcome)
        for again, code in (
            (outcome, "execution_reconciliation_already_delivered"),
            (other, "execution_reconciliation_conflict"),
        ):
            repeat = ResolveRequest(run_id=run_id, action_outcome=again, evidence=evidence, actor=ACTOR)
            try:
                await self._client.resolve(repeat)
            except RequestError as err:
                if err.code != code:
                    self._checker.note(
                        run_id, f"a repeated resolve ({again}) answered {err.code}, expected {code}"
                    )
            else:
                self._checker.note(run_id, f"a repeated resolve ({again}) was accepted, expected {code}")
        return f"operator resolved: {outcome}"
