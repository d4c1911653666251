"""One simulated runner, built on the runner SDK (`continuity_runner`): it commits sessions, asks
`decide` at ready, publishes `resume_failed` events, answers its archive subject, consumes its
own decisions, and follows each decision the way a runner must (wait for `not_before`, commit
the replacement, hand the run to an operator, start a fresh session after `continue_fresh`).
An event refused for a spent quota (contract 10.5) is sent again, under a new id, at its
`not_before`.

After a `retry_same_session`, `open_replacement` or `continue_fresh` the session of the decided
attempt completes its turn with its scenario's `success_probability` (one draw of the runner's
seeded generator): then the runner reports `turn_completed` for that attempt (contract 4.6),
else the run fails again and sends the next attempt's `resume_failed`. A run stopped for an
operator stays stopped until one acts. What followed each decision is the checker's truth.

Every reply it gets is also held against the contract; what does not match is reported to the
checker. Each run is one story, kept as a list of steps for the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

import msgspec
import nats
from continuity_runner import (
    ArchiveRequest,
    ArchiveResult,
    CommitReply,
    ContinuityError,
    Decision,
    HarnessInfo,
    NotFound,
    Refusal,
    ResumeFailed,
    Runner,
    RunnerOptions,
    SessionRef,
    SessionView,
    StaleEpoch,
    connect,
)
from continuity_runner.types import CheckpointPolicy, RecordedOutcome

from continuity.tools.simulate import wire
from continuity.tools.simulate.checker import Checker, Sent
from continuity.tools.simulate.outcomes import Followed
from continuity.tools.simulate.scenarios import (
    ARCHIVE_FAILED,
    ATTEMPT_LIMIT,
    Facts,
    Scenario,
    turn_completes,
)
from shared.contract import subjects
from shared.platform import tracing
from shared.platform.tls import nats_context_from_env

TENANT = "sim"
"""The simulated runners' sessions are all of this tenant."""
GENERATION = "dsh-2026.11.3-p7"
MODEL = "gpt-5-codex"
MAX_NOT_BEFORE_WAIT_S = 60.0

POLICY_TEXT: dict[CheckpointPolicy, str] = {
    "same_session_only": "same session only",
    "allow_replacement_after_governed_wait": "replace after governed wait",
    "allow_replacement_after_resume_failure": "replace after resume failure",
}

# Publications retried with the same Nats-Msg-Id through a NATS restart or a leader election.
PUBLISH_WITHIN_S = 30.0
PUBLISH_ATTEMPTS = 6
PUBLISH_ATTEMPT_TIMEOUT_S = 5.0

# Asked by a run stopped for an operator; returns the operator's step for the story, or None
# when no operator endpoint exists (the run then ends at the stop).
OperatorHook = Callable[[str, str, int, str, RecordedOutcome | None], Awaitable[str | None]]


@dataclass(slots=True)
class Story:
    run_id: str
    scenario: str
    steps: list[str] = field(default_factory=list)
    done: bool = False

    @property
    def path(self) -> str:
        return " → ".join(self.steps)


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    keys: dict[str, bytes]
    archive_fail_rate: float
    archive_timeout_rate: float
    wait_s: float
    """How long a run waits for one decision before it gives up (the checker reports it)."""


class NotIssued(Exception):
    """The session-store refuses the runner's sessions of the simulated tenant (tenancy is
    enforced and the runner is not issued for it)."""


class SimRunner:
    def __init__(
        self,
        runner_id: str,
        nats_url: str,
        run_prefix: str,
        settings: RunnerSettings,
        checker: Checker,
        operator: OperatorHook,
        rng: random.Random,
    ) -> None:
        self.runner_id = runner_id
        self._url = nats_url
        self._prefix = run_prefix
        self._settings = settings
        self._checker = checker
        self._operator = operator
        self._rng = rng
        self._runner: Runner | None = None
        self._decisions: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._inbox: dict[str, asyncio.Queue[Decision | Refusal]] = {}
        self._payloads: dict[str, bytes] = {}
        """Each event of a run in play by its Nats-Msg-Id, to send it again after a refusal."""
        self._dead: dict[str, asyncio.Future[str]] = {}
        self._archive_steps: dict[str, str] = {}
        self._turns: dict[str, tuple[str, int, SessionRef, str, HarnessInfo | None]] = {}
        """Each turn reported, by event id: to send it again after a refusal for the quota."""
        self._resending: set[asyncio.Task[None]] = set()
        self.stories: list[Story] = []
        self.published = 0
        self.resent = 0
        """Events sent again after a refusal for the quota."""

    # ---- life -------------------------------------------------------------------------------

    async def start(self) -> None:
        self._runner = await connect(
            RunnerOptions(
                runner_id=self.runner_id,
                servers=self._url,
                tls_context=nats_context_from_env(self._url),  # TLS as the services use it
                name=f"continuity-sim-{self.runner_id}",
                signing_keys=self._settings.keys,
                # Its turns are signed with the last key; its failures with either (wire.build).
                signing_key_id=sorted(self._settings.keys)[-1],
                request_timeout=10.0,
                publish_timeout=PUBLISH_WITHIN_S,
                publish_attempts=PUBLISH_ATTEMPTS,
                publish_attempt_timeout=PUBLISH_ATTEMPT_TIMEOUT_S,
                # Traced (OTEL_* set): each run's reports and requests continue its run's span.
                trace_context=tracing.current if tracing.ENABLED else None,
            )
        )
        await self._runner.serve_archive(self._on_archive)
        # Its durable consumer: decisions of earlier simulations under this runner id were
        # acknowledged then, and the checker counts any others as foreign.
        self._decisions = asyncio.create_task(
            self._runner.handle_decisions(self._on_decision, on_refusal=self._on_refusal)
        )

    async def probe(self, run_prefix: str) -> None:
        """One commit of a session of the simulated tenant: `NotIssued` when the session-store
        refuses it, which it does for every run then (contract 10.2)."""
        probe = f"{run_prefix}-probe-{self.runner_id}"
        session = SessionRef(tenant=TENANT, conversation_id=probe, agent_id="codex")
        ctx = wire.RunContext(self.runner_id, probe, session, "ns-probe", "same_session_only")
        try:
            await self._commit(ctx, "turn-0", epoch=None)
        except NotFound:
            raise NotIssued(self.runner_id) from None

    async def stop(self) -> None:
        self._stopped.set()
        for task in list(self._resending):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.close()
        if self._decisions is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._decisions, 5)

    @property
    def runner(self) -> Runner:
        assert self._runner is not None
        return self._runner

    # ---- inbound ----------------------------------------------------------------------------

    async def _on_decision(self, d: Decision) -> None:
        self._checker.decision(self.runner_id, d)
        inbox = self._inbox.get(d.run_id)
        if inbox is not None:
            inbox.put_nowait(d)

    async def _on_refusal(self, r: Refusal) -> None:
        self._checker.refusal(self.runner_id, r)
        if r.event_id in self._turns:
            if r.code == "quota_exceeded":
                task = asyncio.create_task(self._send_turn_again(r))
                self._resending.add(task)
                task.add_done_callback(self._resending.discard)
            return
        inbox = self._inbox.get(r.run_id)
        if inbox is not None:
            inbox.put_nowait(r)

    async def _on_archive(self, command: ArchiveRequest) -> ArchiveResult:
        answer = wire.archive_answer(
            self._rng, self._settings.archive_fail_rate, self._settings.archive_timeout_rate
        )
        state = self._checker.archive_requested(self.runner_id, command)
        if state is not None:
            self._checker.archive_answered(state, answer)
        if answer.exit_code is None:
            self._archive_steps[command.run_id] = "archive: runner never answers"
            await self._stopped.wait()  # the archiver must time out
            raise asyncio.CancelledError
        if answer.ok:
            self._archive_steps[command.run_id] = "archive: runner moved its state (exit 0)"
        else:
            self._archive_steps[command.run_id] = (
                f"archive: runner failed (exit {answer.exit_code}, leaky output)"
            )
        return answer.result()

    def dead_letter(self, run_id: str, subject: str, reason: str) -> None:
        future = self._dead.get(run_id)
        if future is not None and not future.done():
            kind = "quarantined" if subject == subjects.DEAD_QUARANTINE else "dead-lettered as invalid"
            future.set_result(f"{kind} ({reason}), no decision")

    # ---- one run ----------------------------------------------------------------------------

    async def play(self, scenario: Scenario, n: int, rng: random.Random | None = None) -> Story:
        """Play one run of `scenario`; its draws (policy, event, turn outcomes) come from `rng`,
        the run's own generator, so that a seeded simulation draws the same whatever order its
        runs interleave in (default: the runner's)."""
        run_id = f"{self._prefix}-{self.runner_id}-{n:06d}"
        story = Story(run_id, scenario.name)
        self.stories.append(story)
        self._inbox[run_id] = asyncio.Queue()
        try:
            with tracing.span(
                "continuity-sim runner run", run_id=run_id, runner_id=self.runner_id, scenario=scenario.name
            ):
                await self._play(scenario, run_id, n, story, rng or self._rng)
        except (ContinuityError, nats.errors.Error, TimeoutError) as exc:
            story.steps.append(f"stopped: {type(exc).__name__}")
            self._checker.note(run_id, f"{scenario.label}: a request failed ({_why(exc)})")
        finally:
            story.done = True
            self._inbox.pop(run_id, None)
            for msg_id in [m for m in self._payloads if m.startswith(f"{run_id}.")]:
                del self._payloads[msg_id]
            self._dead.pop(run_id, None)
            self._archive_steps.pop(run_id, None)
        return story

    async def _play(self, scenario: Scenario, run_id: str, n: int, story: Story, rng: random.Random) -> None:
        policy = rng.choice(tuple(POLICY_TEXT))
        session = SessionRef(tenant=TENANT, conversation_id=f"{run_id}", agent_id="codex")
        handle = f"ns-{run_id}"
        ctx = wire.RunContext(self.runner_id, run_id, session, handle, policy)
        harness = self._harness(scenario)
        cursor = f"turn-{n:06d}"
        committed = await self._commit(ctx, cursor, epoch=None)
        epoch = committed.epoch
        attempt = 1
        while True:
            if not await self._decide_resumes(ctx, cursor):
                story.steps.append("decide did not resume the saved session")
                return
            out = await self._fail(scenario, ctx, attempt, epoch, rng, harness, story)
            if out.facts is None:
                story.steps.append(await self._wait_dead(run_id))
                return
            d = await self._next(run_id, attempt, continued=False, story=story)
            if d is None:
                story.steps.append("no decision")
                return
            if isinstance(d, Refusal):
                story.steps.append(f"refused {d.code}, no decision")
                return
            archive_step = self._archive_steps.pop(run_id, None)
            if archive_step is not None:
                story.steps.append(archive_step)
            story.steps.append(_decision_step(d))
            followed = await self._follow(d, ctx, epoch, cursor, out, attempt, harness, story)
            if followed is None:
                return
            ctx, epoch, decided = followed
            # The decided attempt's session: its turn completes, or the run fails again.
            if turn_completes(scenario, rng):
                await self._turn_completed(ctx, decided, harness)
                self._followed(run_id, decided, "recovered", harness)
                story.steps.append("turn completed")
                return
            if attempt >= ATTEMPT_LIMIT:
                self._followed(run_id, decided, "pending", harness)
                story.steps.append(f"turn failed, run given up after {attempt} attempts")
                return
            self._followed(run_id, decided, "failed", harness)
            attempt += 1

    async def _fail(
        self,
        scenario: Scenario,
        ctx: wire.RunContext,
        attempt: int,
        epoch: int,
        rng: random.Random,
        harness: HarnessInfo | None,
        story: Story,
    ) -> wire.Outgoing:
        """Publishes this attempt's `resume_failed`, told to the checker first."""
        run_id = ctx.run_id
        out = wire.build(scenario, ctx, attempt, self._settings.keys, rng, harness)
        self._checker.sent(
            Sent(
                scenario.name,
                self.runner_id,
                run_id,
                attempt,
                ctx.session,
                ctx.native_session_id,
                epoch,
                out.facts,
                tuple(p for _, p in out.publications),
                out.dead_reason,
            )
        )
        if out.facts is None:
            self._dead[run_id] = asyncio.get_running_loop().create_future()
        story.steps.append(_first_step(scenario, ctx.policy, out.facts) if attempt == 1 else "fails again")
        for msg_id, payload in out.publications:
            self._payloads[msg_id] = payload
            await self._publish(payload, msg_id)
        return out

    async def _follow(
        self,
        d: Decision,
        ctx: wire.RunContext,
        epoch: int,
        cursor: str,
        out: wire.Outgoing,
        attempt: int,
        harness: HarnessInfo | None,
        story: Story,
    ) -> tuple[wire.RunContext, int, Decision] | None:
        """Does what `d` asks; returns the session whose turn then runs, its epoch and the
        decision it follows, or None when the run stops here."""
        run_id = ctx.run_id
        handle = f"ns-{run_id}"
        if d.action == "retry_same_session":
            await self._until(d.not_before)
            if not await self._decide_resumes(ctx, cursor):
                self._followed(run_id, d, "pending", harness)
                return None
            story.steps.append("resumed")
            return ctx, epoch, d
        if d.action == "open_replacement":
            ctx, epoch = await self._replaced(ctx, d, cursor, f"{handle}.r{attempt}")
            story.steps.append("new session committed, zombie fenced off")
            return ctx, epoch, d
        if d.action not in ("operator", "reconcile"):
            self._followed(run_id, d, "pending", harness)
            return None
        self._followed(run_id, d, "held", harness)
        await self._held(ctx, epoch, d.action)
        assert out.facts is not None  # a decided event carries its facts
        tool = out.facts.pending_tool_call
        recorded = _recorded_outcome(out.publications[0][1]) if tool else None
        step = await self._operator(run_id, self.runner_id, attempt, d.action, recorded)
        if step is None:
            story.steps.append("(no operator endpoint: the run stays stopped)")
            return None
        story.steps.append(step)
        follow = await self._next(run_id, attempt, continued=True, story=story)
        if not isinstance(follow, Decision):
            story.steps.append("no continue_fresh")
            return None
        await self._held(ctx, epoch, "continue_fresh")
        story.steps.append("continue_fresh (fresh session, same workspace)")
        ctx, epoch = await self._fresh(ctx, cursor, epoch, f"{handle}.f{attempt}")
        return ctx, epoch, follow

    def _harness(self, scenario: Scenario) -> HarnessInfo | None:
        """The scenario's harness; its version carries the simulation's run prefix as build
        metadata (`2.1.332+sim1a2b3c`), so that `continuity.runs.stats` rows of this simulation
        are told apart from those of every other one."""
        if scenario.harness is None:
            return None
        return HarnessInfo(name=scenario.harness.name, version=f"{scenario.harness.version}+{self._prefix}")

    def _followed(self, run_id: str, d: Decision, what: Followed, harness: HarnessInfo | None) -> None:
        self._checker.followed(run_id, d, what, harness)

    async def _turn_completed(self, ctx: wire.RunContext, d: Decision, harness: HarnessInfo | None) -> None:
        """Report that the session of decided attempt `d.attempt` completed its turn (4.6)."""
        event_id = f"{ctx.run_id}.a{d.attempt}.turn"
        self._turns[event_id] = (ctx.run_id, d.attempt, ctx.session, ctx.native_session_id, harness)
        self._checker.turn_sent(ctx.run_id, d.attempt, d.action, event_id)
        await self.runner.report_turn_completed(
            ctx.run_id, d.attempt, ctx.session, ctx.native_session_id, harness=harness, event_id=event_id
        )
        self.published += 1

    async def _send_turn_again(self, r: Refusal) -> None:
        """A turn refused for the quota, again under a new id at `not_before` (contract 10.5)."""
        found = self._turns.pop(r.event_id, None)
        if found is None:
            return
        run_id, attempt, session, native_session_id, harness = found
        self.resent += 1
        event_id = f"{run_id}.a{attempt}.turn.q{self.resent}"
        self._turns[event_id] = found
        await self._until(r.not_before)
        self._checker.turn_resent(run_id, attempt, event_id)
        try:
            await self.runner.report_turn_completed(
                run_id, attempt, session, native_session_id, harness=harness, event_id=event_id
            )
        except (ContinuityError, nats.errors.Error, TimeoutError) as exc:
            self._checker.note(run_id, f"the turn could not be sent again ({_why(exc)})")
            return
        self.published += 1

    # ---- the runner's side of the contract --------------------------------------------------

    async def _commit(self, ctx: wire.RunContext, cursor: str, epoch: int | None) -> CommitReply:
        return await self.runner.commit(
            ctx.session,
            ctx.native_session_id,
            "codex",
            MODEL,
            f"/workspaces/sim/{ctx.session.conversation_id}",
            ctx.policy,
            cursor=cursor,
            prompt_hash="0" * 16,
            compatibility_generation=GENERATION,
            epoch=epoch,
        )

    async def _decide_resumes(self, ctx: wire.RunContext, cursor: str) -> bool:
        reply = await self.runner.decide(
            ctx.session,
            "codex",
            MODEL,
            f"/workspaces/sim/{ctx.session.conversation_id}",
            latest_cursor=cursor,
            compatibility="profile-ready",
            ready_generation=GENERATION,
        )
        if reply.mode != "resume" or reply.resume_session_id != ctx.native_session_id:
            self._checker.note(
                ctx.run_id,
                f"decide at ready answered {reply.mode}/{reply.reason} for an active, unchanged "
                "session; expected resume of the saved handle",
            )
            return False
        return True

    async def _held(self, ctx: wire.RunContext, epoch: int, after: str) -> None:
        """After operator, reconcile or continue_fresh the saved session is held, unchanged."""
        view = await self._get(ctx.session)
        if view.state != "held" or view.native_session_id != ctx.native_session_id or view.epoch != epoch:
            self._checker.note(
                ctx.run_id,
                f"after {after} the saved session is {view.state} (epoch {view.epoch}), "
                f"expected held and unchanged (epoch {epoch})",
            )

    async def _replaced(
        self, ctx: wire.RunContext, d: Decision, cursor: str, handle: str
    ) -> tuple[wire.RunContext, int]:
        """After open_replacement: the old record is archived under the new epoch; the new session
        (`handle`) commits with that epoch, and a zombie from before the replacement is fenced
        off. Returns the new session's context and epoch."""
        view = await self._get(ctx.session)
        if view.state != "archived" or view.epoch != d.epoch:
            self._checker.note(
                ctx.run_id,
                f"after open_replacement the record is {view.state} epoch {view.epoch}, "
                f"expected archived epoch {d.epoch}",
            )
        new_epoch = d.epoch or 0
        fresh = wire.RunContext(ctx.runner_id, ctx.run_id, ctx.session, handle, ctx.policy)
        reply = await self._commit(fresh, cursor, epoch=new_epoch)
        if reply.epoch != new_epoch:
            self._checker.note(
                ctx.run_id, f"the replacement committed at epoch {reply.epoch}, not {new_epoch}"
            )
        try:
            await self._commit(ctx, cursor, epoch=new_epoch - 1)
        except StaleEpoch:
            pass
        except ContinuityError as err:
            self._checker.note(ctx.run_id, f"a zombie commit got {err.code}, expected stale_epoch")
        else:
            self._checker.note(ctx.run_id, "a zombie commit from before the replacement was accepted")
        return fresh, reply.epoch

    async def _fresh(
        self, ctx: wire.RunContext, cursor: str, epoch: int, handle: str
    ) -> tuple[wire.RunContext, int]:
        """After continue_fresh: a fresh session (`handle`) in the same workspace is committed
        over the held record (kept aside, contract 3.2). Returns its context and epoch."""
        fresh = wire.RunContext(ctx.runner_id, ctx.run_id, ctx.session, handle, ctx.policy)
        reply = await self._commit(fresh, cursor, epoch=epoch)
        return fresh, reply.epoch

    async def _get(self, session: SessionRef) -> SessionView:
        return await self.runner.get(session)

    async def _publish(self, payload: bytes, msg_id: str) -> None:
        """The scenario's exact bytes (some deliberately invalid, or re-sent under one id), through
        the SDK's publication: retried with the same `Nats-Msg-Id` until JetStream confirms."""
        await self.runner.publish_event(subjects.event(self.runner_id, "resume_failed"), payload, msg_id)
        self.published += 1

    async def _next(
        self, run_id: str, attempt: int, *, continued: bool, story: Story
    ) -> Decision | Refusal | None:
        """The run's next decision of this attempt, or the final refusal of its event; None when
        neither came in time. A refusal for the quota sends the event again and waits on."""
        inbox = self._inbox[run_id]
        deadline = time.monotonic() + self._settings.wait_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                d = await asyncio.wait_for(inbox.get(), left)
            except TimeoutError:
                return None
            if d.attempt != attempt:
                continue
            if isinstance(d, Refusal):
                if d.code != "quota_exceeded":
                    return d
                if await self._send_again(run_id, attempt, d):
                    story.steps.append("quota exceeded: sent again at not_before")
                    deadline = time.monotonic() + self._settings.wait_s
                continue
            if (d.action == "continue_fresh") == continued:
                return d

    async def _send_again(self, run_id: str, attempt: int, r: Refusal) -> bool:
        """The refused event again, under a new id, at `not_before` (contract 10.5); False when
        it is not one of this run's."""
        payload = self._payloads.pop(r.event_id, None)
        if payload is None:
            return False
        event = msgspec.json.decode(payload, type=ResumeFailed)
        self.resent += 1
        again = msgspec.structs.replace(event, event_id=f"{run_id}.a{attempt}.q{self.resent}")
        payload = msgspec.json.encode(again)
        await self._until(r.not_before)
        self._checker.resent(run_id, attempt, payload)
        self._payloads[again.event_id] = payload
        await self._publish(payload, again.event_id)
        return True

    async def _wait_dead(self, run_id: str) -> str:
        future = self._dead[run_id]
        try:
            return await asyncio.wait_for(future, self._settings.wait_s)
        except TimeoutError:
            return "no dead letter seen"

    async def _until(self, not_before: str | None) -> None:
        """A retry waits for `not_before` (bounded, so a wrong value cannot stall the fleet)."""
        if not not_before:
            return
        try:
            at = datetime.fromisoformat(not_before.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return
        delay = min(max(0.0, at - time.time()), MAX_NOT_BEFORE_WAIT_S)
        if delay:
            await asyncio.sleep(delay)  # the contract's backoff: a runner must not retry earlier


def _first_step(scenario: Scenario, policy: CheckpointPolicy, facts: Facts | None) -> str:
    if facts is None or scenario.failure_class != "unclassified" or facts.pending_tool_call:
        return scenario.label
    text = POLICY_TEXT[policy]
    if policy == "allow_replacement_after_governed_wait":
        text += ", wait elapsed" if facts.governed_wait_elapsed else ", wait not elapsed"
    return f"{scenario.label} ({text})"


def _decision_step(d: Decision) -> str:
    if d.action == "open_replacement":
        return f"open_replacement (epoch {d.epoch})"
    if d.reason == ARCHIVE_FAILED:
        return f"{d.action} (archive failed, detail redacted)"
    if d.action in ("operator", "reconcile"):
        return f"{d.action} {d.reason} (saved session held)"
    return f"{d.action} {d.reason}"


def _recorded_outcome(payload: bytes) -> RecordedOutcome | None:
    event = msgspec.json.decode(payload, type=ResumeFailed)
    return event.pending_tool_call.recorded_outcome if event.pending_tool_call else None


def _why(exc: Exception) -> str:
    if isinstance(exc, ContinuityError):
        return f"{exc.status} {exc.code}"
    return type(exc).__name__
