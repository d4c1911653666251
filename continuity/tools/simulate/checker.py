"""The checker: every decision a simulated runner receives is held against what the runner sent,
what it answered to archive requests, and what the operator did (contract sections 4 to 6); a
refusal of its event (section 10.5) is one only for `quota_exceeded`, after which the runner
sends the event again.

It is pure bookkeeping, no I/O: runners, the operator and the dead-letter watcher report to it,
and it returns the contradictions it finds. Expected outcomes carry a deadline; `overdue`
reports the ones that never arrived.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import msgspec
from continuity_runner import ArchiveRequest, Decision, HarnessInfo, Refusal, SessionRef
from continuity_runner.types import ActionOutcome

from continuity.tools.simulate.outcomes import Followed, Truth, row_key
from continuity.tools.simulate.scenarios import (
    ARCHIVE_FAILED,
    ARCHIVE_FAILED_PREFIX,
    DETAIL_LIMIT,
    RECOVERED_STATUS,
    SCENARIOS,
    Expected,
    Facts,
    after_failed_archive,
    expected,
)
from continuity.tools.simulate.wire import ArchiveAnswer
from shared.contract import subjects
from shared.contract.decisions import RunOutcome

Stage = Literal["decision", "dead", "continue", "outcome"]
OperatorAct = Literal["resolve", "retry"]

DEAD_SUBJECTS = {"quarantine": subjects.DEAD_QUARANTINE, "invalid": subjects.DEAD_INVALID}


@dataclass(frozen=True, slots=True)
class Sent:
    """One event a runner published, with everything needed to judge what comes back."""

    scenario: str
    runner_id: str
    run_id: str
    attempt: int
    session: SessionRef
    native_session_id: str
    epoch: int
    """The session's epoch when the event was sent."""
    facts: Facts | None
    """None: the event must get no decision (quarantined or invalid)."""
    payloads: tuple[bytes, ...] = ()
    dead_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Contradiction:
    run_id: str
    scenario: str
    text: str


@dataclass(slots=True)
class AttemptState:
    sent: Sent
    expected: Expected | None
    first: Decision | None = None
    archive: ArchiveAnswer | None = None
    archive_id: str | None = None
    act: OperatorAct | None = None
    act_outcome: ActionOutcome | None = None
    continued: Decision | None = None
    dead: tuple[str, str] | None = None
    decision_ids: dict[bool, str] = field(default_factory=dict)
    """Per stage (continue_fresh or not), the first decision id seen."""


@dataclass(slots=True)
class TurnState:
    """A `turn_completed` a runner sent for a decided attempt, and the outcome recorded for it."""

    action: str
    """The action of the decision the turn followed."""
    event_ids: list[str]
    outcome: RunOutcome | None = None


@dataclass(slots=True)
class RunState:
    scenario: str
    runner_id: str
    session: SessionRef
    attempts: dict[int, AttemptState] = field(default_factory=dict)
    turns: dict[int, TurnState] = field(default_factory=dict)
    """By decided attempt: the turns its runner reported (at most one per run)."""


class Checker:
    def __init__(
        self,
        run_prefix: str,
        *,
        deadline_s: float = 30.0,
        archive_timeout_s: float = 30.0,
        watch_dead_letters: bool = True,
        watch_outcomes: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_prefix = run_prefix
        self.deadline_s = deadline_s
        self.archive_timeout_s = archive_timeout_s
        self.watch_dead_letters = watch_dead_letters
        self.watch_outcomes = watch_outcomes
        self._clock = clock
        self.runs: dict[str, RunState] = {}
        self.contradictions: list[Contradiction] = []
        self.decisions: Counter[tuple[str, str]] = Counter()
        self.dead_letters: Counter[tuple[str, str]] = Counter()
        self.refusals: Counter[str] = Counter()
        """Refusals of the runners' events by code (contract 10.5)."""
        self.events = 0
        self.redelivered = 0
        self.foreign = 0
        self.late_archive_answers = 0
        self._open: dict[tuple[str, int, Stage], tuple[float, str]] = {}
        self._by_payload: dict[int, tuple[str, int]] = {}
        self._archive_ids: set[str] = set()
        self.truth = Truth()
        """What followed each decision, as the runners drew it."""
        self.turns = 0
        """`turn_completed` events sent (once per decided attempt; re-sent ones not counted)."""
        self.turns_resent = 0
        """Turns sent again after a refusal for the quota."""
        self.outcomes: Counter[str] = Counter()
        """Outcomes recorded for the simulation's runs, by status."""
        self._turn_events: dict[str, tuple[str, int]] = {}

    # ---- reports from runners and the operator ----------------------------------------------

    def sent(self, sent: Sent) -> None:
        run = self.runs.get(sent.run_id)
        if run is None:
            run = self.runs[sent.run_id] = RunState(sent.scenario, sent.runner_id, sent.session)
        exp = expected(sent.facts) if sent.facts is not None else None
        run.attempts[sent.attempt] = AttemptState(sent, exp)
        self.events += 1
        for payload in sent.payloads:
            self._by_payload[hash(payload)] = (sent.run_id, sent.attempt)
        now = self._clock()
        if exp is None:
            if self.watch_dead_letters:
                what = f"a dead letter on {DEAD_SUBJECTS[SCENARIOS[sent.scenario].dead or 'invalid']}"
                self._expect(sent.run_id, sent.attempt, "dead", now + self.deadline_s, what)
            return
        wait = self.deadline_s + (self.archive_timeout_s if exp.verdict == "archive" else 0.0)
        what = f"a decision ({_verdict_text(exp)})"
        self._expect(sent.run_id, sent.attempt, "decision", now + wait, what)

    def resent(self, run_id: str, attempt: int, payload: bytes) -> None:
        """The runner sent a refused event again under a new id (after `quota_exceeded`): its
        outcome is awaited anew, and a dead letter of the new payload is the run's."""
        state = self._attempt(run_id, attempt)
        if state is None:
            return
        self._by_payload[hash(payload)] = (run_id, attempt)
        stage: Stage = "decision" if state.expected is not None else "dead"
        pending = self._open.get((run_id, attempt, stage))
        if pending is not None:
            self._expect(run_id, attempt, stage, self._clock() + self.deadline_s, pending[1])

    def archive_requested(self, runner_id: str, command: ArchiveRequest) -> AttemptState | None:
        """The archiver asked this runner to move a run's state; None when it must not have."""
        run = self.runs.get(command.run_id)
        if run is None:
            if command.run_id.startswith(self.run_prefix):
                self._flag(command.run_id, "?", "archive requested for a run this runner never sent")
            return None
        if command.archive_id in self._archive_ids:
            self._flag(command.run_id, run.scenario, f"archive {command.archive_id} requested twice")
            return None
        self._archive_ids.add(command.archive_id)
        if runner_id != run.runner_id or command.session != run.session:
            self._flag(command.run_id, run.scenario, "archive requested of another runner or session")
        waiting = [
            st
            for st in run.attempts.values()
            if st.expected is not None
            and st.expected.verdict == "archive"
            and (st.first is None or _timed_out(st.first))
            and st.archive_id is None
        ]
        if not waiting:
            self._flag(
                command.run_id,
                run.scenario,
                f"archive requested, but no event of this run may reach replacement "
                f"({_story(run)}): a closed class or policy must never be archived",
            )
            return None
        state = max(waiting, key=lambda st: st.sent.attempt)
        if command.native_session_id != state.sent.native_session_id:
            self._flag(command.run_id, run.scenario, "archive requested for another native session")
        state.archive_id = command.archive_id
        return state

    def archive_answered(self, state: AttemptState, answer: ArchiveAnswer) -> None:
        """Recorded before the answer is sent: the decision may follow at once."""
        state.archive = answer

    def operator_acting(
        self, run_id: str, attempt: int, act: OperatorAct, outcome: ActionOutcome | None
    ) -> None:
        """Recorded before the operator's request, whose decision may arrive before its reply."""
        state = self._attempt(run_id, attempt)
        if state is None:
            return
        state.act, state.act_outcome = act, outcome
        what = "continue_fresh after " + (
            "the operator's resolution" if act == "resolve" else "operator retry"
        )
        self._expect(run_id, attempt, "continue", self._clock() + self.deadline_s, what)

    def operator_failed(self, run_id: str, attempt: int) -> None:
        state = self._attempt(run_id, attempt)
        if state is not None and state.continued is None:
            state.act = state.act_outcome = None
            self._open.pop((run_id, attempt, "continue"), None)

    def followed(self, run_id: str, d: Decision, what: Followed, harness: HarnessInfo | None) -> None:
        """What followed decision `d` of the run, as its runner knows it: the truth tally."""
        run = self.runs.get(run_id)
        if run is None:
            return
        state = run.attempts.get(d.attempt)
        archived = None
        if state is not None and state.expected is not None and state.sent.facts is not None:
            if state.expected.verdict == "archive":
                archived = (state.expected.rule, state.sent.facts.failure_class)
        self.truth.add(run.scenario, row_key(d, harness, archived), what)

    def turn_sent(self, run_id: str, attempt: int, action: str, event_id: str) -> None:
        """A runner reported that the session of decided `attempt` completed its turn: its
        outcome is awaited (when outcomes are watched)."""
        run = self.runs.get(run_id)
        if run is None:
            return
        self.turns += 1
        run.turns[attempt] = TurnState(action, [event_id])
        self._turn_events[event_id] = (run_id, attempt)
        if self.watch_outcomes:
            status = RECOVERED_STATUS[action]
            self._expect(run_id, attempt, "outcome", self._clock() + self.deadline_s, f"the outcome {status}")

    def turn_resent(self, run_id: str, attempt: int, event_id: str) -> None:
        """The turn, refused for the quota, sent again under `event_id`: awaited anew."""
        run = self.runs.get(run_id)
        turn = run.turns.get(attempt) if run is not None else None
        if turn is None:
            return
        turn.event_ids.append(event_id)
        self._turn_events[event_id] = (run_id, attempt)
        self.turns_resent += 1
        pending = self._open.get((run_id, attempt, "outcome"))
        if pending is not None:
            self._expect(run_id, attempt, "outcome", self._clock() + self.deadline_s, pending[1])

    def is_turn(self, event_id: str) -> bool:
        return event_id in self._turn_events

    def outcome(self, o: RunOutcome) -> list[Contradiction]:
        """Judge one outcome seen on `continuity.decisions.<runner_id>.outcome`."""
        before = len(self.contradictions)
        run = self.runs.get(o.run_id)
        if run is None:
            if o.run_id.startswith(self.run_prefix):
                self._flag(o.run_id, "?", f"outcome {o.status} for a run no runner sent")
            return self.contradictions[before:]
        turn = run.turns.get(o.attempt)
        if turn is None:
            self._flag(
                o.run_id,
                run.scenario,
                f"outcome {o.status} for attempt {o.attempt}, whose session no runner reported "
                "completing a turn",
            )
            return self.contradictions[before:]
        if turn.outcome is not None:
            if turn.outcome.outcome_id != o.outcome_id or turn.outcome.status != o.status:
                self._flag(
                    o.run_id,
                    run.scenario,
                    f"two outcomes for attempt {o.attempt}: {turn.outcome.status} and {o.status}",
                )
            return self.contradictions[before:]  # the same outcome seen again
        turn.outcome = o
        self.outcomes[o.status] += 1
        self._met(o.run_id, o.attempt, "outcome")
        want = RECOVERED_STATUS[turn.action]
        if (o.status, o.action, o.runner_id) != (want, turn.action, run.runner_id):
            self._flag(
                o.run_id,
                run.scenario,
                f"the turn after {turn.action} (attempt {o.attempt}) recorded {o.status} for "
                f"{o.action} of {o.runner_id}, expected {want} for {turn.action} of {run.runner_id}",
            )
        if o.outcome_id != f"{o.run_id}:{o.attempt}:outcome":
            self._flag(
                o.run_id, run.scenario, f"outcome_id {o.outcome_id!r} is not <run_id>:<attempt>:outcome"
            )
        return self.contradictions[before:]

    def final_statuses(self) -> dict[str, str]:
        """The final status each run whose turn was recorded must show in `runs list` (every run
        whose turn was sent, when outcomes are not watched)."""
        final: dict[str, str] = {}
        for run_id, run in self.runs.items():
            for turn in run.turns.values():
                if turn.outcome is not None or not self.watch_outcomes:
                    final[run_id] = RECOVERED_STATUS[turn.action]
        return final

    def note(self, run_id: str, text: str) -> None:
        """A contradiction found outside decisions (a session-store or operator reply)."""
        run = self.runs.get(run_id)
        self._flag(run_id, run.scenario if run else "?", text)

    def dead_letter(self, subject: str, reason: str, payload: bytes) -> str | None:
        """A dead letter seen on `continuity.dead.>`; returns the run it belongs to, if ours."""
        found = self._by_payload.get(hash(payload))
        if found is None:
            return self._turn_dead(subject, reason, payload)
        run_id, attempt = found
        run = self.runs[run_id]
        state = run.attempts[attempt]
        self.dead_letters[(subject, reason)] += 1
        if state.dead is not None:
            return run_id
        state.dead = (subject, reason)
        scenario = SCENARIOS[run.scenario]
        if state.expected is not None:
            self._met(run_id, attempt, "decision")  # a dead-lettered event gets no decision: one report
            self._flag(
                run_id,
                run.scenario,
                f"a valid {scenario.label} event was dead-lettered on {subject} ({reason})"
                + (
                    " - are the services started with the simulator's keys?"
                    if subject == subjects.DEAD_QUARANTINE
                    else ""
                ),
            )
            return run_id
        self._met(run_id, attempt, "dead")
        want = DEAD_SUBJECTS[scenario.dead or "invalid"]
        if subject != want:
            self._flag(run_id, run.scenario, f"{scenario.label} dead-lettered on {subject}, expected {want}")
        elif state.sent.dead_reason is not None and reason != state.sent.dead_reason:
            self._flag(
                run_id,
                run.scenario,
                f"{scenario.label} dead-lettered with reason {reason}, expected {state.sent.dead_reason}",
            )
        return run_id

    def _turn_dead(self, subject: str, reason: str, payload: bytes) -> str | None:
        """A dead letter of one of the runners' `turn_completed` events: never due."""
        try:
            event_id = msgspec.json.decode(payload, type=_EventId).event_id
        except msgspec.MsgspecError:
            return None  # another client's dead letter
        found = self._turn_events.get(event_id)
        if found is None:
            return None
        run_id, attempt = found
        run = self.runs[run_id]
        self.dead_letters[(subject, reason)] += 1
        self._met(run_id, attempt, "outcome")
        self._flag(
            run_id,
            run.scenario,
            f"the turn_completed of attempt {attempt} was dead-lettered on {subject} ({reason}); "
            "a turn after the attempt's decision must be recorded",
        )
        return run_id

    # ---- decisions and refusals -------------------------------------------------------------

    def refusal(self, runner_id: str, r: Refusal) -> list[Contradiction]:
        """Judge one refusal received on `continuity.decisions.<runner_id>`: the simulated runners
        own their sessions and runs, so only a spent quota may refuse their events."""
        before = len(self.contradictions)
        self.refusals[r.code] += 1
        if r.event_id in self._turn_events:
            return self._turn_refusal(runner_id, r)
        run = self.runs.get(r.run_id)
        state = run.attempts.get(r.attempt) if run is not None else None
        if run is None or state is None:
            if r.run_id.startswith(self.run_prefix):
                self._flag(r.run_id, run.scenario if run else "?", f"refusal {r.code} of an event never sent")
            else:
                self.foreign += 1
            return self.contradictions[before:]
        if runner_id != run.runner_id or r.runner_id != run.runner_id:
            self._flag(r.run_id, run.scenario, "a refusal went to another runner than the event's")
        if r.code == "quota_exceeded":
            if r.not_before is None:
                self._flag(r.run_id, run.scenario, "quota_exceeded without not_before")
            return self.contradictions[before:]  # the runner sends the event again
        if state.dead is not None:
            return self.contradictions[before:]  # its dead letter came first and was judged
        # Final: no decision and no further dead letter to wait for (its dead letter, on
        # continuity.dead.refused, would only repeat this).
        state.dead = (subjects.DEAD_REFUSED, r.code)
        self._met(r.run_id, r.attempt, "decision")
        self._met(r.run_id, r.attempt, "dead")
        self._flag(
            r.run_id,
            run.scenario,
            f"the event of attempt {r.attempt} was refused {r.code}: a runner's event on its own "
            "session and run must be decided (tenancy enforced and the simulated runners not issued?)",
        )
        return self.contradictions[before:]

    def _turn_refusal(self, runner_id: str, r: Refusal) -> list[Contradiction]:
        before = len(self.contradictions)
        run_id, attempt = self._turn_events[r.event_id]
        run = self.runs[run_id]
        if runner_id != run.runner_id or r.runner_id != run.runner_id:
            self._flag(run_id, run.scenario, "a refusal of a turn went to another runner than the turn's")
        if r.code == "quota_exceeded":
            if r.not_before is None:
                self._flag(run_id, run.scenario, "quota_exceeded without not_before")
            return self.contradictions[before:]  # the runner sends the turn again
        self._met(run_id, attempt, "outcome")
        self._flag(
            run_id,
            run.scenario,
            f"the turn_completed of attempt {attempt} was refused {r.code}: a runner's turn on its "
            "own run must be recorded",
        )
        return self.contradictions[before:]

    # ---- decisions --------------------------------------------------------------------------

    def decision(self, runner_id: str, d: Decision) -> list[Contradiction]:
        """Judge one decision received on `continuity.decisions.<runner_id>`."""
        before = len(self.contradictions)
        run = self.runs.get(d.run_id)
        if run is None:
            if d.run_id.startswith(self.run_prefix):
                self._flag(d.run_id, "?", f"{d.action} for a run no runner sent")
            else:
                self.foreign += 1  # an earlier simulation's, or another client's
            return self.contradictions[before:]
        state = run.attempts.get(d.attempt)
        if state is None:
            self._flag(d.run_id, run.scenario, f"{d.action} for attempt {d.attempt}, which was never sent")
            return self.contradictions[before:]
        continued = d.action == "continue_fresh"
        seen = state.decision_ids.get(continued)
        if seen == d.decision_id:
            self.redelivered += 1  # the same decision delivered again: harmless
            return self.contradictions[before:]
        self.decisions[(d.action, d.reason)] += 1
        if seen is not None:
            self._flag(
                d.run_id,
                run.scenario,
                f"two decisions for (run_id, attempt {d.attempt}): {seen} and {d.decision_id}",
            )
            return self.contradictions[before:]
        state.decision_ids[continued] = d.decision_id
        self._check_envelope(runner_id, run, d)
        if state.expected is None:
            label = SCENARIOS[run.scenario].label
            self._flag(
                d.run_id, run.scenario, f"{label} event got {d.action}; it must get no decision at all"
            )
        elif continued:
            self._check_continue(run, state, d)
        else:
            state.first = d
            self._met(d.run_id, d.attempt, "decision")
            self._check_first(run, state, state.expected, d)
        return self.contradictions[before:]

    def _check_envelope(self, runner_id: str, run: RunState, d: Decision) -> None:
        if d.decision_id != f"{d.run_id}:{d.attempt}:{d.action}":
            self._flag(
                d.run_id, run.scenario, f"decision_id {d.decision_id!r} is not <run_id>:<attempt>:<action>"
            )
        if d.runner_id != runner_id or runner_id != run.runner_id:
            self._flag(d.run_id, run.scenario, f"decision for runner {d.runner_id} on {runner_id}'s subject")
        if d.session != run.session:
            self._flag(d.run_id, run.scenario, "decision names another session")

    def _check_first(self, run: RunState, state: AttemptState, exp: Expected, d: Decision) -> None:
        facts = state.sent.facts
        assert facts is not None
        label = SCENARIOS[run.scenario].label
        if d.failure_class is not None and d.failure_class != facts.failure_class:
            self._flag(
                d.run_id,
                run.scenario,
                f"{label} classified {d.failure_class}, expected {facts.failure_class}",
            )
        if exp.verdict != "archive":
            if (d.action, d.reason) != (exp.verdict, exp.reason):
                closed = facts.failure_class != "unclassified" or facts.pending_tool_call
                why = (
                    " (a closed class must never reach replacement)"
                    if closed and d.action == "open_replacement"
                    else ""
                )
                self._flag(
                    d.run_id,
                    run.scenario,
                    f"{label} (attempt {d.attempt}, {facts.policy}) got {d.action}/{d.reason}, "
                    f"expected {exp.verdict}/{exp.reason}{why}",
                )
            elif d.action == "retry_same_session" and d.not_before is None:
                self._flag(d.run_id, run.scenario, "retry_same_session without not_before")
            return
        answer = state.archive
        if d.action == "open_replacement":
            if d.reason != exp.reason:
                self._flag(
                    d.run_id, run.scenario, f"open_replacement with reason {d.reason}, expected {exp.reason}"
                )
            if answer is None:
                self._flag(d.run_id, run.scenario, "open_replacement before the runner was asked to archive")
            elif not answer.ok:
                self._flag(
                    d.run_id,
                    run.scenario,
                    f"open_replacement although the runner's archive "
                    f"{'never answered' if answer.exit_code is None else f'exited {answer.exit_code}'}",
                )
            if d.epoch != state.sent.epoch + 1:
                self._flag(
                    d.run_id,
                    run.scenario,
                    f"open_replacement with epoch {d.epoch}, expected {state.sent.epoch + 1}",
                )
            return
        if d.reason == ARCHIVE_FAILED:
            self._check_archive_failed(run, state, d)
            return
        self._flag(
            d.run_id,
            run.scenario,
            f"{label} (attempt {d.attempt}, {facts.policy}) got {d.action}/{d.reason}, expected an archive, "
            f"then open_replacement or {ARCHIVE_FAILED}",
        )

    def _check_archive_failed(self, run: RunState, state: AttemptState, d: Decision) -> None:
        answer = state.archive
        want = after_failed_archive(d.attempt)
        if d.action != want:
            self._flag(
                d.run_id,
                run.scenario,
                f"archive failure at attempt {d.attempt} got {d.action}, expected {want}",
            )
        detail = d.detail or ""
        if not detail.startswith(ARCHIVE_FAILED_PREFIX):
            self._flag(
                d.run_id, run.scenario, f"archive-failed detail does not start with {ARCHIVE_FAILED_PREFIX!r}"
            )
        if len(detail) > DETAIL_LIMIT:
            self._flag(
                d.run_id,
                run.scenario,
                f"archive-failed detail has {len(detail)} characters (> {DETAIL_LIMIT})",
            )
        if answer is None:
            if _timed_out(d):
                # The request is still queued at the runner behind a loaded event loop; the
                # archiver rightly timed out. The request, when it comes, is matched to this.
                self.late_archive_answers += 1
            else:
                self._flag(d.run_id, run.scenario, "archive failure with an exit code the runner never sent")
            return
        leaked = [s for s in answer.fake_secrets if s[:12] in detail]
        if leaked:
            self._flag(d.run_id, run.scenario, f"archive-failed detail leaks {len(leaked)} fake secret(s)")
        exit_text = "null" if answer.exit_code is None else str(answer.exit_code)
        timed_out = "true" if answer.exit_code is None else "false"
        said = detail.split(" ", 3)[1:3]
        if said == [f"exit={exit_text}", f"timedOut={timed_out}"]:
            if answer.ok:
                self._flag(
                    d.run_id, run.scenario, "archive failure reported although the runner answered exit 0"
                )
        elif said == ["exit=null", "timedOut=true"]:
            # The answer was sent but reached the archiver after its timeout (a loaded host):
            # a failure is the safe reading of a late answer, so it is counted, not flagged.
            self.late_archive_answers += 1
        else:
            self._flag(
                d.run_id,
                run.scenario,
                f"archive-failed detail says {' '.join(said)!r}, the runner's answer was "
                f"exit={exit_text} timedOut={timed_out}",
            )

    def _check_continue(self, run: RunState, state: AttemptState, d: Decision) -> None:
        first = state.first
        if first is None or first.action not in ("operator", "reconcile"):
            got = first.action if first else "no decision"
            self._flag(
                d.run_id, run.scenario, f"continue_fresh after {got}: only an operator stop may continue"
            )
        if state.act is None:
            self._flag(d.run_id, run.scenario, "continue_fresh before any operator resolution or retry")
            return
        state.continued = d
        self._met(d.run_id, d.attempt, "continue")
        if state.act == "resolve":
            if d.reason != "execution_reconciled" or d.reconciled_outcome != state.act_outcome:
                self._flag(
                    d.run_id,
                    run.scenario,
                    f"continue_fresh {d.reason}/{d.reconciled_outcome} after a resolution "
                    f"{state.act_outcome}, expected execution_reconciled/{state.act_outcome}",
                )
        elif d.reason != "operator_retry":
            self._flag(d.run_id, run.scenario, f"continue_fresh {d.reason} after operator retry")

    # ---- expectations and their deadlines ---------------------------------------------------

    def _expect(self, run_id: str, attempt: int, stage: Stage, due: float, what: str) -> None:
        self._open[(run_id, attempt, stage)] = (due, what)

    def _met(self, run_id: str, attempt: int, stage: Stage) -> None:
        self._open.pop((run_id, attempt, stage), None)

    def outstanding(self) -> int:
        return len(self._open)

    def overdue(self, now: float | None = None) -> list[Contradiction]:
        """Report every expected outcome whose deadline passed (each once)."""
        now = self._clock() if now is None else now
        before = len(self.contradictions)
        for key, (due, what) in list(self._open.items()):
            if due <= now:
                run_id, attempt, _ = key
                del self._open[key]
                run = self.runs[run_id]
                self._flag(
                    run_id,
                    run.scenario,
                    f"{SCENARIOS[run.scenario].label} attempt {attempt}: expected {what}, "
                    "none arrived in time",
                )
        return self.contradictions[before:]

    # ---- helpers ----------------------------------------------------------------------------

    def _attempt(self, run_id: str, attempt: int) -> AttemptState | None:
        run = self.runs.get(run_id)
        return run.attempts.get(attempt) if run else None

    def _flag(self, run_id: str, scenario: str, text: str) -> None:
        self.contradictions.append(Contradiction(run_id, scenario, text))


class _EventId(msgspec.Struct):
    event_id: str


def _timed_out(d: Decision) -> bool:
    """An archive-failed decision whose detail says the runner never answered in time."""
    return d.reason == ARCHIVE_FAILED and (d.detail or "").split(" ", 3)[1:3] == [
        "exit=null",
        "timedOut=true",
    ]


def _verdict_text(exp: Expected) -> str:
    if exp.verdict == "archive":
        return f"archive, then open_replacement or {ARCHIVE_FAILED}"
    return f"{exp.verdict}/{exp.reason}"


def _story(run: RunState) -> str:
    return ", ".join(f"attempt {a}: {SCENARIOS[run.scenario].label}" for a in sorted(run.attempts))
