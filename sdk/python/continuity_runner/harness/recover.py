"""`Runner.recover`: from what a resume left to what Continuity is told, in one call.

The outcome is assessed with the harness's rules. Not a failure: nothing is sent, unless the
resume followed a decision (`decided_attempt`): then a `turn_completed` tells Continuity the
decision worked (contract 4.6). A failure: the
presence probe is asked first (unless told not to); when it finds the session absent from the
host, the saved handle is rejected (contract 3.4, `resume_target_missing`) and nothing is
reported, so the next `decide` starts fresh with the full transcript. Otherwise a `resume_failed`
is reported with a command result signed with the class (`unclassified`: classification null), so
the classifier decides by the class's row; it names the harness (`harness`, with the version when
given), as a `turn_completed` does. The TypeScript SDK does the same (src/harness/recover.ts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from continuity_runner.checks import check_value
from continuity_runner.contract import (
    CommandResult,
    ErrorInfo,
    HarnessInfo,
    RejectReply,
    SessionRef,
    ToolCall,
)
from continuity_runner.harness.adapter import Adapter
from continuity_runner.harness.match import OutcomeInput
from continuity_runner.harness.probe import Env, Presence
from continuity_runner.harness.table import HarnessClass
from continuity_runner.types import Attempt, HarnessName, HarnessVersion, RejectCode, Token


class Reporter(Protocol):
    """What `recover_verdict` asks of a runner (`Runner` is one): named here, so that this
    module needs nothing of the runner's module, which calls it."""

    def sign_command_result(
        self,
        run_id: str,
        attempt: int,
        command: str,
        status: str,
        classification: str | None = None,
        issued_at: str | None = None,
    ) -> CommandResult: ...

    async def reject(
        self, session: SessionRef, native_session_id: str, code: RejectCode, *, traceparent: str | None = None
    ) -> RejectReply: ...

    async def report_resume_failure(
        self,
        run_id: str,
        attempt: int,
        session: SessionRef,
        native_session_id: str,
        error: ErrorInfo | None = None,
        command_result: CommandResult | None = None,
        pending_tool_call: ToolCall | None = None,
        governed_wait_elapsed: bool = False,
        event_id: str | None = None,
        *,
        harness: HarnessInfo | None = None,
        traceparent: str | None = None,
    ) -> str: ...

    async def report_turn_completed(
        self,
        run_id: str,
        attempt: int,
        session: SessionRef,
        native_session_id: str,
        *,
        harness: HarnessInfo | None = None,
        event_id: str | None = None,
        traceparent: str | None = None,
    ) -> str: ...


FAILED_STATUS = "failed"
"""The signed command result's status of a failed resume."""


@dataclass(frozen=True)
class NotAFailure:
    """The rule said the outcome is not a failure: the resumed session completed its turn.
    Without `decided_attempt` nothing was sent (`reported_event_id` None); with it, a
    `turn_completed` for that attempt was published, whose `event_id` is `reported_event_id`."""

    kind: ClassVar[Literal["not_a_failure"]] = "not_a_failure"
    rule: str
    reported_event_id: str | None = None


@dataclass(frozen=True)
class Reported:
    """A `resume_failed` was published (`event_id`), its command result signed with
    `failure_class` (classification null for `unclassified`); the decision comes on the decisions
    subject. `presence`: what the probe said (`present` or `unknown`), None when not asked."""

    kind: ClassVar[Literal["reported"]] = "reported"
    event_id: str
    failure_class: HarnessClass
    rule: str
    presence: Presence | None


@dataclass(frozen=True)
class Rejected:
    """The probe found the session absent from the host: the saved handle was rejected
    (`resume_target_missing`; `cleared` as the session-store answered: False when the record
    saves another handle). Nothing was reported."""

    kind: ClassVar[Literal["rejected"]] = "rejected"
    code: ClassVar[Literal["resume_target_missing"]] = "resume_target_missing"
    failure_class: HarnessClass
    rule: str
    cleared: bool


Verdict = NotAFailure | Reported | Rejected


async def recover_verdict(
    runner: Reporter,
    adapter: Adapter,
    outcome: OutcomeInput,
    *,
    session: SessionRef,
    run_id: str,
    attempt: int,
    native_session_id: str,
    cwd: str | None = None,
    env: Env | None = None,
    probe_first: bool = True,
    command: str | None = None,
    pending_tool_call: ToolCall | None = None,
    governed_wait_elapsed: bool = False,
    event_id: str | None = None,
    traceparent: str | None = None,
    harness_version: str | None = None,
    decided_attempt: int | None = None,
) -> Verdict:
    """See `Runner.recover`."""
    _check(
        adapter.name, session, run_id, attempt, native_session_id, harness_version, decided_attempt, event_id
    )
    info = HarnessInfo(name=adapter.name, version=harness_version)
    assessment = adapter.assess(outcome)
    if assessment.failure_class is None:
        if decided_attempt is None:
            return NotAFailure(assessment.rule)
        sent = await runner.report_turn_completed(
            run_id,
            decided_attempt,
            session,
            native_session_id,
            harness=info,
            event_id=event_id,
            traceparent=traceparent,
        )
        return NotAFailure(assessment.rule, sent)
    failure_class: HarnessClass = assessment.failure_class
    presence = adapter.probe(native_session_id, cwd=cwd, env=env) if probe_first else None
    if presence == "absent":
        reply = await runner.reject(
            session, native_session_id, "resume_target_missing", traceparent=traceparent
        )
        return Rejected(failure_class, assessment.rule, reply.cleared)
    signed = _signed(runner, adapter.name, command, run_id, attempt, failure_class)
    sent = await runner.report_resume_failure(
        run_id,
        attempt,
        session,
        native_session_id,
        command_result=signed,
        pending_tool_call=pending_tool_call,
        governed_wait_elapsed=governed_wait_elapsed,
        event_id=event_id,
        harness=info,
        traceparent=traceparent,
    )
    return Reported(sent, failure_class, assessment.rule, presence)


def _check(
    harness: str,
    session: SessionRef,
    run_id: str,
    attempt: int,
    native_session_id: str,
    harness_version: str | None,
    decided_attempt: int | None,
    event_id: str | None,
) -> None:
    """Called first: everything is checked before the probe looks or anything is sent."""
    check_value(run_id, Token, "run_id")
    check_value(attempt, Attempt, "attempt")
    check_value(native_session_id, Token, "native_session_id")
    check_value(harness, HarnessName, "harness.name")
    if harness_version is not None:
        check_value(harness_version, HarnessVersion, "harness.version")
    if decided_attempt is not None:
        check_value(decided_attempt, Attempt, "decided_attempt")
    if event_id is not None:
        check_value(event_id, Token, "event_id")
    if not isinstance(session, SessionRef):
        raise TypeError("session must be a SessionRef")


def _signed(
    runner: Reporter,
    harness: str,
    command: str | None,
    run_id: str,
    attempt: int,
    failure_class: HarnessClass,
) -> CommandResult:
    """The failed resume's command result, signed with the class: classification null for
    `unclassified`, so the classifier decides as for a runner without an adapter."""
    resumed_by = command if command is not None else f"{harness}.resume"
    classification = None if failure_class == "unclassified" else failure_class
    return runner.sign_command_result(run_id, attempt, resumed_by, FAILED_STATUS, classification)
