"""What a simulated runner puts on the wire: its `resume_failed` events, scenario by scenario,
and its answers to archive requests (with fake secrets in the output, which must never reach a
decision). Messages are the runner SDK's (`continuity_runner`), signed by its signing code."""

from __future__ import annotations

import random
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec
from continuity_runner import (
    ArchiveResult,
    CommandResult,
    ErrorInfo,
    HarnessInfo,
    ResumeFailed,
    SessionRef,
    ToolCall,
)
from continuity_runner.signing import now_rfc3339, sign_command_result
from continuity_runner.types import CheckpointPolicy

from continuity.tools.simulate.keys import UNKNOWN_KEY_ID
from continuity.tools.simulate.scenarios import Facts, Scenario
from shared.contract.types import FailureClass

_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One event of a scenario: the publications that carry it, and what the runner knows."""

    event_id: str
    publications: list[tuple[str, bytes]]
    """(Nats-Msg-Id, payload) in order; a duplicate scenario has several."""
    facts: Facts | None
    """None: the event must get no decision (quarantined or invalid)."""
    dead_reason: str | None = None


@dataclass(frozen=True, slots=True)
class RunContext:
    runner_id: str
    run_id: str
    session: SessionRef
    native_session_id: str
    policy: CheckpointPolicy


def _signed(
    ctx: RunContext,
    attempt: int,
    classification: str,
    key_id: str,
    key: bytes,
    command: str = "provider.attach",
    status: str = "refused",
) -> CommandResult:
    return sign_command_result(
        key_id, key, ctx.runner_id, ctx.run_id, attempt, command, status, classification
    )


def _event(ctx: RunContext, attempt: int, event_id: str, **fields: object) -> ResumeFailed:
    return ResumeFailed(
        type="resume_failed",
        event_id=event_id,
        runner_id=ctx.runner_id,
        run_id=ctx.run_id,
        attempt=attempt,
        session=ctx.session,
        native_session_id=ctx.native_session_id,
        occurred_at=now_rfc3339(),
        **fields,  # type: ignore[arg-type]
    )


TRANSPORT_ERRORS = (
    None,
    ErrorInfo(type="transport", code="stream_closed", message="websocket closed by peer"),
    ErrorInfo(type="transport", code="connection_reset", message="read: connection reset by peer"),
)


def build(
    scenario: Scenario,
    ctx: RunContext,
    attempt: int,
    keys: Mapping[str, bytes],
    rng: random.Random,
    harness: HarnessInfo | None = None,
) -> Outgoing:
    """The event of `scenario` for this attempt of the run, naming `harness` (a garbage payload
    names none)."""
    event_id = f"{ctx.run_id}.a{attempt}"
    governed = rng.random() < 0.5
    key_id = rng.choice(sorted(keys))  # both live keys sign, as during a rotation
    name = scenario.name
    if name == "garbage":
        return _garbage(ctx, attempt, event_id, rng)
    fields: dict[str, object] = {"governed_wait_elapsed": governed, "harness": harness}
    failure_class = _failure(scenario, ctx, attempt, key_id, keys[key_id], rng, fields)
    payload = _encode(_event(ctx, attempt, event_id, **fields))
    facts = None
    if failure_class is not None:
        facts = Facts(failure_class, name == "pending", attempt, ctx.policy, governed)
    publications = [(event_id, payload)]
    if name == "duplicate":
        # The same message re-sent (the stream's duplicate window drops it), then the same
        # run and attempt under another event id (the classifier must not decide twice).
        again = _encode(_event(ctx, attempt, f"{event_id}.resent", **fields))
        publications += [(event_id, payload), (f"{event_id}.resent", again)]
    return Outgoing(event_id, publications, facts, scenario.dead_reason)


def _failure(
    scenario: Scenario,
    ctx: RunContext,
    attempt: int,
    key_id: str,
    key: bytes,
    rng: random.Random,
    fields: dict[str, object],
) -> FailureClass | None:
    """Adds to `fields` what the event of `scenario` says of its failure; returns the failure
    class the services must find in it."""
    name = scenario.name
    if name in ("drop", "duplicate"):
        fields["error"] = rng.choice(TRANSPORT_ERRORS)
    elif name == "disguised":
        fields["error"] = ErrorInfo(
            type="runner_error",
            code="resume_failed",
            message="provider_attach_refused; native_runner_source_git_reconciliation_required",
        )
    elif name == "refusal":
        fields["command_result"] = _signed(ctx, attempt, "provider_attach_refused", key_id, key)
    elif name == "pending":
        fields["pending_tool_call"] = _tool_call(ctx, rng)
        if rng.random() < 0.5:  # half the time the provider's signed answer says so too
            fields["command_result"] = _signed(
                ctx, attempt, "provider_side_effect_pending", key_id, key, "provider.resume", "blocked"
            )
            return "provider_side_effect_pending"
    elif name == "source":
        part = rng.choice(("git", "workspace", "lockfile"))
        fields["error"] = ErrorInfo(
            type="runner", code=f"native_runner_source_{part}_reconciliation_required"
        )
    elif name == "incompatible":
        fields["error"] = ErrorInfo(type="runner", code="runner_remote_provider_artifact_incompatible")
    elif name == "replay":
        fields["error"] = ErrorInfo(type="runner", code="native_event_replay_conflict")
    elif name == "forged":
        wrong = secrets.token_bytes(32)
        fields["command_result"] = _signed(ctx, attempt, "provider_attach_refused", key_id, wrong)
    elif name == "unknown_key":
        fields["command_result"] = _signed(
            ctx, attempt, "provider_attach_refused", UNKNOWN_KEY_ID, secrets.token_bytes(32)
        )
    return scenario.failure_class


def _tool_call(ctx: RunContext, rng: random.Random) -> ToolCall:
    """The tool call a pending scenario's event says was left running."""
    return ToolCall(
        tool_call_id=f"tc-{ctx.run_id}",
        tool_name=rng.choice(("shell.exec", "git.push", "http.post")),
        started_at=now_rfc3339(),
        recorded_outcome=rng.choice((None, "completed", "not_performed")),
    )


def _garbage(ctx: RunContext, attempt: int, event_id: str, rng: random.Random) -> Outgoing:
    kind = rng.randrange(4)
    reason: str | None = None
    if kind == 0:
        # Unique per run, so that its dead letter can be told apart from another run's.
        payload = b"\xff\xfe resume failed " + ctx.run_id.encode() + b" {not json"
    elif kind == 1:
        bad = msgspec.to_builtins(_event(ctx, attempt, event_id))
        bad["attempt"] = 0  # outside `attempt >= 1`
        payload = _encode(bad)
    elif kind == 2:
        bad = msgspec.to_builtins(_event(ctx, attempt, event_id))
        del bad["session"]
        payload = _encode(bad)
    else:
        claims = RunContext("sim-elsewhere", ctx.run_id, ctx.session, ctx.native_session_id, ctx.policy)
        payload = _encode(_event(claims, attempt, event_id))
        reason = "runner_mismatch"
    return Outgoing(event_id, [(event_id, payload)], None, reason)


# ---- archive answers ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchiveAnswer:
    exit_code: int | None
    """None: the runner never answers (the archiver times out)."""
    output: str
    fake_secrets: tuple[str, ...]
    """Distinctive parts of every fake secret in `output`: none may reach a decision."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def result(self) -> ArchiveResult:
        return ArchiveResult(exit_code=self.exit_code, timed_out=False, output=self.output)


def _fake(tag: str) -> str:
    return f"FAKE{tag}{secrets.token_hex(8)}"


def archive_answer(rng: random.Random, fail_rate: float, timeout_rate: float) -> ArchiveAnswer:
    draw = rng.random()
    if draw < timeout_rate:
        return ArchiveAnswer(None, "", ())
    token, api, bearer, password = _fake("T"), _fake("K"), _fake("B"), _fake("P")
    leaky = (
        f'token={token} OPENAI_API_KEY=sk-{api} Authorization: Bearer {bearer} {{"password": "{password}"}} '
    )
    values = (token, api, bearer, password)
    if draw < timeout_rate + fail_rate:
        # Long enough that the detail must be cut to 512 characters.
        noise = "mv: cannot move '.continuity/session' to '.continuity/archive': Permission denied\n" * 8
        output = f"archive step failed; env dump: {leaky}\n{noise}"
        return ArchiveAnswer(rng.choice((1, 2, 74, 127)), output, values)
    return ArchiveAnswer(0, f"moved saved state aside; {leaky}", values)
