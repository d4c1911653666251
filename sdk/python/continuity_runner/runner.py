"""The runner's side of contract v1: `connect` returns a `Runner`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from continuity_runner import limits, subjects, tracing
from continuity_runner.checks import archive_answer, check_value, encode_checked
from continuity_runner.contract import (
    TURN_COMMAND,
    TURN_STATUS,
    ArchiveRequest,
    ArchiveResult,
    ClaimRequest,
    CommandResult,
    CommitReply,
    CommitRequest,
    DecideReply,
    DecideRequest,
    Decision,
    ErrorInfo,
    GetRequest,
    HarnessInfo,
    OwnershipReply,
    Refusal,
    RejectReply,
    RejectRequest,
    ResumeFailed,
    SessionRef,
    SessionView,
    ToolCall,
    TurnCompleted,
)
from continuity_runner.delivery import Acknowledged, Delivery
from continuity_runner.denials import Denials
from continuity_runner.errors import (
    InternalError,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    Unavailable,
    error_from_reply,
)
from continuity_runner.harness.adapter import Adapter
from continuity_runner.harness.match import OutcomeInput
from continuity_runner.harness.probe import Env
from continuity_runner.harness.recover import Verdict, recover_verdict
from continuity_runner.options import RunnerOptions
from continuity_runner.signing import now_rfc3339, sign_command_result
from continuity_runner.types import Attempt, CheckpointPolicy, Compatibility, RejectCode, Token

if TYPE_CHECKING:
    from continuity_runner.harness.compatibility import Components

log = logging.getLogger("continuity_runner")
log.addHandler(logging.NullHandler())  # a library's records show only where the program routes them

R = TypeVar("R")


class _Kind(msgspec.Struct):
    """What a message of the decisions subject is: its `type` alone (a decision of an earlier
    release may have none)."""

    type: str = "decision"


_encode = msgspec.json.Encoder().encode
_kind = msgspec.json.Decoder(_Kind)
_decision = msgspec.json.Decoder(Decision)
_refusal = msgspec.json.Decoder(Refusal)
_archive_request = msgspec.json.Decoder(ArchiveRequest)
FETCH_WAIT_S = 1.0
"""How long one pull waits for a decision; also how soon iteration notices `drain`/`close`."""
REPORTS_KEPT = 1024
"""How many of its latest reports a runner keeps, so that `report_again` can send one the
classifier refused for its quota."""

DecisionHandler = Callable[[Decision], Awaitable[None]]
RefusalHandler = Callable[[Refusal], Awaitable[None]]
ArchiveHandler = Callable[[ArchiveRequest], Awaitable[ArchiveResult]]


async def connect(options: RunnerOptions) -> Runner:
    """Connect to NATS as `options.runner_id`.

    The first connection must be made within `options.connect_timeout` seconds, else
    `Unavailable` (naming the last error's type, never a URL: it may hold credentials). Once
    made, the connection reconnects forever until closed."""

    async def disconnected() -> None:
        log.warning("nats_disconnected runner_id=%s", options.runner_id)

    async def reconnected() -> None:
        log.info("nats_reconnected runner_id=%s", options.runner_id)

    denials = Denials()

    async def error(exc: Exception) -> None:
        denials.report(str(exc))
        log.warning("nats_error runner_id=%s error_type=%s", options.runner_id, type(exc).__name__)

    # Reconnect forever, every half second (nats-py declares the wait an int; it takes seconds).
    reconnect: dict[str, Any] = {
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
    }
    nc = Client()
    try:
        # With reconnection on, as it must be afterwards, nats-py also tries the servers forever
        # before a first connection: only this bound ends that wait.
        await asyncio.wait_for(
            nc.connect(
                disconnected_cb=disconnected,
                reconnected_cb=reconnected,
                error_cb=error,
                **reconnect,
                **options.nats_options(),
            ),
            options.connect_timeout,
        )
    except TimeoutError:
        last = nc.last_error
        with contextlib.suppress(Exception):
            await nc.close()
        raise Unavailable(
            f"no NATS server could be connected to within {options.connect_timeout}s"
            + (f" (last error: {type(last).__name__})" if last is not None else "")
        ) from None
    return Runner(nc, options, denials)


class Runner:
    """One runner's connection to Continuity. Create it with `connect`."""

    def __init__(self, nc: Client, options: RunnerOptions, denials: Denials | None = None) -> None:
        self.options = options
        self._denials = denials or Denials()
        self.runner_id = options.runner_id
        self._nc = nc
        self._js = nc.jetstream(timeout=options.request_timeout)
        self._closing = False
        self._archive_sub: Subscription | None = None
        self._archive_tasks: set[asyncio.Task[None]] = set()
        self._reported: OrderedDict[str, ResumeFailed | TurnCompleted] = OrderedDict()
        self._acknowledged = Acknowledged()
        """Decisions acknowledged through `Delivery.ack`: a copy of one is not delivered again."""
        self._last_traceparent: str | None = None

    @property
    def last_traceparent(self) -> str | None:
        """The `traceparent` the last report or request carried (None before the first)."""
        return self._last_traceparent

    def _traceparent(self, given: str | None) -> str:
        """The call's own (`InvalidRequest` when malformed), else the hook's when it gives a
        valid one, else a new trace's; kept as `last_traceparent`."""
        if given is not None:
            if not tracing.is_traceparent(given):
                raise InvalidRequest("traceparent: not a version-00 W3C traceparent", field="traceparent")
            chosen = given
        else:
            hook = self.options.trace_context
            try:
                offered = hook() if hook is not None else None
            except Exception:  # a tracer's failure must not stop a recovery
                offered = None
            chosen = (
                offered
                if offered is not None and tracing.is_traceparent(offered)
                else tracing.new_traceparent()
            )
        self._last_traceparent = chosen
        return chosen

    @property
    def nc(self) -> Client:
        """The NATS connection (for what the SDK does not cover)."""
        return self._nc

    # ---- the session-store (contract sections 3 and 10) --------------------------------------

    # Every request goes to `continuity.sessions.<runner_id>.<op>`: the services act for the
    # runner named there. A session outside the runner's tenants, or owned by another runner, is
    # answered as one that does not exist (contract 10.2, 10.3).

    async def decide(
        self,
        session: SessionRef,
        adapter: str,
        model: str,
        cwd: str,
        latest_cursor: str | None = None,
        compatibility: Compatibility = "none",
        ready_generation: str | None = None,
        ready_components: Components | Mapping[str, str] | None = None,
        *,
        traceparent: str | None = None,
    ) -> DecideReply:
        """Resume or fresh, asked at the provider's `ready` frame, before the turn is sent. A
        session the runner may not see is `fresh` with `no_session`.

        `ready_components` (a `harness.compatibility.Components`, or their digests) are what the
        ready generation is made of: without `ready_generation` it is theirs; with it, it must
        be. A fresh answer across a changed generation then names the components that changed
        (`changed_components`), and an operator's per-component declarations may resume it."""
        digests = None
        if ready_components is not None:
            from continuity_runner.harness.compatibility import on_the_wire

            digests, ready_generation = on_the_wire(
                ready_components, ready_generation, "ready_components", "ready_generation"
            )
        request = DecideRequest(
            session=session,
            adapter=adapter,
            model=model,
            cwd=cwd,
            latest_cursor=latest_cursor,
            compatibility=compatibility,
            ready_generation=ready_generation,
            ready_components=digests,  # type: ignore[arg-type]
        )
        subject = subjects.sessions(self.runner_id, "decide")
        return await self._request(subject, request, DecideReply, traceparent)

    async def commit(
        self,
        session: SessionRef,
        native_session_id: str,
        adapter: str,
        model: str,
        cwd: str,
        checkpoint_policy: CheckpointPolicy,
        cursor: str | None = None,
        prompt_hash: str | None = None,
        compatibility_generation: str | None = None,
        expected_revision: int | None = None,
        epoch: int | None = None,
        cancelled: bool = False,
        compatibility_components: Components | Mapping[str, str] | None = None,
        *,
        traceparent: str | None = None,
    ) -> CommitReply:
        """Save the session after a turn (or a validated cancellation); the first commit binds
        the session to this runner. Raises `RevisionConflict`, `StaleEpoch`, `SessionHeld` or
        `SessionNotOwned` (another runner of the tenant owns it) when nothing was written, and
        `NotFound` for a session outside the runner's tenants.

        `compatibility_components` (a `harness.compatibility.Components`, or their digests) are
        stored with the generation, which is theirs when `compatibility_generation` is None (and
        must be theirs when it is not)."""
        digests = None
        if compatibility_components is not None:
            from continuity_runner.harness.compatibility import on_the_wire

            digests, compatibility_generation = on_the_wire(
                compatibility_components,
                compatibility_generation,
                "compatibility_components",
                "compatibility_generation",
            )
        request = CommitRequest(
            session=session,
            native_session_id=native_session_id,
            adapter=adapter,
            model=model,
            cwd=cwd,
            checkpoint_policy=checkpoint_policy,
            cursor=cursor,
            prompt_hash=prompt_hash,
            compatibility_generation=compatibility_generation,
            expected_revision=expected_revision,
            epoch=epoch,
            cancelled=cancelled,
            compatibility_components=digests,  # type: ignore[arg-type]
        )
        subject = subjects.sessions(self.runner_id, "commit")
        return await self._request(subject, request, CommitReply, traceparent)

    async def reject(
        self, session: SessionRef, native_session_id: str, code: RejectCode, *, traceparent: str | None = None
    ) -> RejectReply:
        """The resume target is missing or corrupt: the next decision reseeds with the full
        transcript once."""
        request = RejectRequest(session=session, native_session_id=native_session_id, code=code)
        subject = subjects.sessions(self.runner_id, "reject")
        return await self._request(subject, request, RejectReply, traceparent)

    async def get(self, session: SessionRef, *, traceparent: str | None = None) -> SessionView:
        """The saved record, without secrets. Raises `NotFound` when there is none, or when the
        runner may not see it."""
        subject = subjects.sessions(self.runner_id, "get")
        return await self._request(subject, GetRequest(session=session), SessionView, traceparent)

    async def claim(self, session: SessionRef, *, traceparent: str | None = None) -> OwnershipReply:
        """Take over a session of the runner's tenant that another runner owns (a runner pool
        whose task moved host). The epoch and revision go up by one, fencing the previous owner;
        commit afterwards with the reply's `epoch`. Raises `ClaimRefused` unless the services
        allow claims (`CONTINUITY_SESSION_CLAIMS=allow`), `SessionHeld` for a held session (an
        operator transfers it), `NotFound` without a record or outside the runner's tenants.
        A claim by the owner changes nothing."""
        subject = subjects.sessions(self.runner_id, "claim")
        return await self._request(subject, ClaimRequest(session=session), OwnershipReply, traceparent)

    async def _request(
        self, subject: str, request: msgspec.Struct, reply_type: type[R], traceparent: str | None = None
    ) -> R:
        """Send `request` once it holds to the contract (`InvalidRequest` before anything is
        sent otherwise) and return the reply as `reply_type`, or raise its typed error."""
        payload = encode_checked(request, limits.MAX_REQUEST_BYTES)
        headers = {tracing.HEADER: self._traceparent(traceparent)}
        try:
            msg = await self._denials.guard(
                subject,
                self._nc.request(subject, payload, timeout=self.options.request_timeout, headers=headers),
            )
        except nats.errors.NoRespondersError:
            raise Unavailable(f"no service answers {subject}") from None
        except TimeoutError:
            raise Unavailable(f"no answer on {subject} within {self.options.request_timeout}s") from None
        except nats.errors.Error as exc:
            raise Unavailable(f"{subject} could not be asked ({type(exc).__name__})") from None
        failure = error_from_reply(msg.data, msg.headers)
        if failure is not None:
            raise failure
        try:
            return msgspec.json.decode(msg.data, type=reply_type)
        except msgspec.MsgspecError:
            raise InternalError(f"the reply on {subject} is not a contract {reply_type.__name__}") from None

    # ---- resume failures (contract section 4) -----------------------------------------------

    def sign_command_result(
        self,
        run_id: str,
        attempt: int,
        command: str,
        status: str,
        classification: str | None = None,
        issued_at: str | None = None,
    ) -> CommandResult:
        """A command result signed with this runner's key (`signing_keys`/`signing_key_id`), for
        the event of `run_id` and `attempt`. Checked as the event will be (`InvalidRequest`)."""
        check_value(run_id, Token, "run_id")
        check_value(attempt, Attempt, "attempt")
        key_id, key = self.options.signing_key()
        result = sign_command_result(
            key_id, key, self.runner_id, run_id, attempt, command, status, classification, issued_at
        )
        encode_checked(result, limits.MAX_EVENT_BYTES, "command_result")
        return result

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
    ) -> str:
        """Publish a `resume_failed` event and return its `event_id`.

        The event is checked against the contract first (`InvalidRequest` if it does not hold:
        the classifier would only dead-letter it). It is published with `Nats-Msg-Id` =
        `event_id` and sent again with the same id until JetStream acknowledges it, for at most
        `publish_timeout` seconds (`Unavailable` after that): the stream's duplicate window
        keeps one copy, and the classifier decides once per run and attempt.

        It carries `traceparent` (else the `trace_context` hook's, else a new trace's; then
        `last_traceparent`): the decision comes back in that trace. `harness` names the harness
        the session lives in (contract 4.6): the outcomes of the decision are grouped by it.
        """
        event = ResumeFailed(
            type="resume_failed",
            event_id=event_id or uuid.uuid4().hex,
            runner_id=self.runner_id,
            run_id=run_id,
            attempt=attempt,
            session=session,
            native_session_id=native_session_id,
            occurred_at=now_rfc3339(),
            error=error,
            command_result=command_result,
            pending_tool_call=pending_tool_call,
            governed_wait_elapsed=governed_wait_elapsed,
            harness=harness,
        )
        return await self._report(event, traceparent)

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
    ) -> str:
        """Publish a `turn_completed` event (contract 4.6) and return its `event_id`: the session
        of a decided attempt completed a turn, so the decision worked.

        `attempt` is the attempt of the decision the turn follows (the decision's own `attempt`,
        which is its `resume_failed`'s); `native_session_id` is the session that completed the
        turn: the resumed one after `retry_same_session`, the replacement after
        `open_replacement`, the fresh one after `continue_fresh`. Send it once, after the first
        turn that completes after the decision; the services record one outcome per
        `(run_id, attempt)`, so sending it again changes nothing. `harness` names the harness
        the session lives in (`HarnessInfo(name="claude-code", version="2.1.332")`).

        The event carries a result signed with the runner's key (`sign_command_result`: command
        `turn`, status `completed`, no classification), so the services trust it. It is checked
        against the contract first (`InvalidRequest`, nothing sent), then published and sent
        again as `report_resume_failure`'s event is; `resend` and `report_again` take it too.
        """
        result = self.sign_command_result(run_id, attempt, TURN_COMMAND, TURN_STATUS)
        event = TurnCompleted(
            type="turn_completed",
            event_id=event_id or uuid.uuid4().hex,
            runner_id=self.runner_id,
            run_id=run_id,
            attempt=attempt,
            session=session,
            native_session_id=native_session_id,
            occurred_at=now_rfc3339(),
            result=result,
            harness=harness,
        )
        return await self._report(event, traceparent)

    async def recover(
        self,
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
        """What a resume of `native_session_id` with the harness of `adapter` left (`outcome`:
        its exit code, output, and for an SDK harness the exception), turned into one of these
        (the verdicts' and continuity_runner.harness.recover's docstrings say more):

        - `NotAFailure(rule, reported_event_id)`: the turn completed; with `decided_attempt`
          (the `attempt` of the decision this resume followed) a `turn_completed` for it is
          published (`report_turn_completed`, contract 4.6): the decision is judged `recovered`.
        - `Rejected(failure_class, rule, cleared)`: a failure, and the presence probe (unless
          `probe_first` is False) finds no file of the session on this host: the saved handle
          is rejected (`resume_target_missing`, contract 3.4) and nothing is reported.
        - `Reported(event_id, failure_class, rule, presence)`: a `resume_failed` is published,
          its command result signed with the class: its row decides (contract 4.4.10 to 4.4.13).

        `cwd` is the working directory the session was saved in and `env` the environment the
        harness runs with (its sessions' root, HOME; default `os.environ`): without `cwd`, the
        probe of a harness that keys sessions by it answers `unknown` and the failure is
        reported. `command` is the signed result's command (default `<harness>.resume`); the
        other arguments are `report_resume_failure`'s (`event_id` is the `turn_completed`'s when
        one is sent). Everything is checked before the probe looks or anything is sent:
        `InvalidRequest` for a bad argument, an outcome of the wrong types or larger than 4 MiB."""
        return await recover_verdict(
            self,
            adapter,
            outcome,
            session=session,
            run_id=run_id,
            attempt=attempt,
            native_session_id=native_session_id,
            cwd=cwd,
            env=env,
            probe_first=probe_first,
            command=command,
            pending_tool_call=pending_tool_call,
            governed_wait_elapsed=governed_wait_elapsed,
            event_id=event_id,
            traceparent=traceparent,
            harness_version=harness_version,
            decided_attempt=decided_attempt,
        )

    async def report_again(self, refusal: Refusal, *, traceparent: str | None = None) -> str:
        """Send the report that `refusal` refused for its quota again, with a new `event_id`, at
        `not_before` (waiting until then), and return the new `event_id` (contract 10.5, 10.6).

        Only a `quota_exceeded` refusal may be sent again (`InvalidRequest` otherwise: every
        other code is final). The report must be one of the last `REPORTS_KEPT` this runner
        made since it connected (`NotFound` otherwise: send it again with
        `report_resume_failure` and the same arguments). For `quota` `event_rate` the wait is
        seconds at most; for `stored_runs` it lasts until the runner's (or tenant's) oldest run
        leaves the run retention, which may be days: a runner may rather stop the run then."""
        if refusal.code != "quota_exceeded":
            raise InvalidRequest(
                f"a {refusal.code} refusal is final: only quota_exceeded is sent again", field="code"
            )
        if refusal.event_id not in self._reported:
            raise NotFound("the refused report is not one this runner still keeps")
        await _until(refusal.not_before)
        return await self._send_again(refusal.event_id, traceparent)

    async def resend(self, event_id: str, *, traceparent: str | None = None) -> str:
        """Send a report whose decision has not come again, now, with a new `event_id`, and
        return the new `event_id` (contract 9.13).

        A stream can lose an acknowledged message, or its consumer pass over one, under a
        network partition (docs/protocol.md, "Under partitions"); the runner is the one party
        that knows what it sent. A runner that has had neither a decision nor a refusal for a
        report within its own bound sends it again. The classifier decides once per run and
        attempt (contract 4.5), so this is always safe: a report decided meanwhile gets no
        second decision. The report must be one of the last `REPORTS_KEPT` this runner made
        since it connected (`NotFound` otherwise: report it again with
        `report_resume_failure` and the same arguments)."""
        return await self._send_again(event_id, traceparent)

    async def _send_again(self, event_id: str, traceparent: str | None) -> str:
        event = self._reported.get(event_id)
        if event is None:  # never kept, or sent again already (by another call, while one waited)
            raise NotFound("the report is not one this runner still keeps")
        # The same report: the failure, its time and its signed result; only the id is new.
        new_id = await self._report(msgspec.structs.replace(event, event_id=uuid.uuid4().hex), traceparent)
        # Forgotten only once the new one is acknowledged: a failed publication can be retried.
        self._reported.pop(event_id, None)
        return new_id

    async def _report(self, event: ResumeFailed | TurnCompleted, traceparent: str | None) -> str:
        payload = encode_checked(event, limits.MAX_EVENT_BYTES)
        subject = subjects.event(self.runner_id, event.type)
        await self.publish_event(subject, payload, event.event_id, traceparent=traceparent)
        self._reported[event.event_id] = event
        while len(self._reported) > REPORTS_KEPT:
            self._reported.popitem(last=False)
        return event.event_id

    async def publish_event(
        self, subject: str, payload: bytes, msg_id: str, *, traceparent: str | None = None
    ) -> None:
        """Publish `payload` to JetStream with `Nats-Msg-Id` = `msg_id`, sent again with the same
        id until JetStream acknowledges it: at most `publish_attempts` times within
        `publish_timeout` seconds (then `Unavailable`). A message the stream refuses
        (`InvalidRequest`) or the authorization refuses (`PermissionDenied`) is not sent again.

        `report_resume_failure` is the way to report a failure; this is the publication under it,
        for payloads built elsewhere."""
        headers = {"Nats-Msg-Id": msg_id, tracing.HEADER: self._traceparent(traceparent)}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.publish_timeout
        backoff = 0.1
        for tries in range(1, self.options.publish_attempts + 1):
            left = deadline - loop.time()
            publication = self._js.publish(
                subject,
                payload,
                timeout=max(0.05, min(self.options.publish_attempt_timeout, left)),
                headers=headers,
            )
            try:
                await self._denials.guard(subject, publication)
                return
            except nats.js.errors.BadRequestError:
                raise InvalidRequest("the stream refused the message") from None
            except (nats.errors.Error, TimeoutError) as exc:
                if self._closing or self._nc.is_closed:
                    raise Unavailable("the runner is closed; the message was not published") from None
                left = deadline - loop.time()
                if left <= 0 or tries == self.options.publish_attempts:
                    raise Unavailable(
                        f"the message was not acknowledged after {tries} attempts "
                        f"within {self.options.publish_timeout}s"
                    ) from None
                log.warning(
                    "event_publish_retry msg_id=%s try=%d error_type=%s", msg_id, tries, type(exc).__name__
                )
                await asyncio.sleep(min(backoff, left))  # backoff between publications
                backoff = min(backoff * 2, 2.0)
        raise AssertionError("publish_attempts is at least 1")  # the loop returns or raises

    # ---- decisions (contract section 4.5) and refusals (section 10.5) ------------------------

    async def decisions(self, batch: int = 1) -> AsyncIterator[Delivery]:
        """The runner's decisions and the refusals of its events (`Delivery.message` is a
        `Decision` or a `Refusal`), from its durable consumer, until `drain` or `close`.

        With `create_consumer` (the default) the consumer `<runner_id>` is looked up first and
        created when missing (`NotFound` when that is not permitted); a connection that may not
        even look it up (the shipped NATS authorization: an operator creates it) binds it as it
        is. With `create_consumer=False` it is bound without any JetStream API call: a runner
        of the shipped authorization may only fetch from and acknowledge its own consumer. A
        connection not permitted to fetch from it gets `PermissionDenied`.

        Each delivery must be acknowledged (`Delivery.ack`) once acted on. A decision this
        runner acknowledged is delivered once: a copy (a redelivery after its acknowledgement was
        lost, or the same `decision_id` stored again) is acknowledged and skipped. A message that
        is neither a contract decision nor a refusal is terminated (never redelivered) and skipped.
        """
        stream = subjects.DECISIONS_STREAM
        if self.options.create_consumer:
            await self._ensure_decisions_consumer()
        sub = await self._js.pull_subscribe_bind(consumer=self.runner_id, stream=stream)
        next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{self.runner_id}"
        try:
            while not self._closing:
                try:
                    msgs = await self._denials.guard(next_subject, sub.fetch(batch, timeout=FETCH_WAIT_S))
                except TimeoutError:
                    continue
                except nats.errors.Error as exc:
                    if self._closing or self._nc.is_closed:
                        return
                    # Disconnected, or JetStream not ready yet (a server restart): pull again.
                    log.warning("decision_fetch_failed error_type=%s", type(exc).__name__)
                    await asyncio.sleep(FETCH_WAIT_S / 4)  # pause before the next pull
                    continue
                for msg in msgs:
                    message = _message(msg.data)
                    if message is None:
                        log.warning("decision_invalid subject=%s", msg.subject)
                        with contextlib.suppress(nats.errors.Error):
                            await msg.term()
                        continue
                    if isinstance(message, Decision) and message.decision_id in self._acknowledged:
                        # A copy of a decision acted on (its ack lost, or stored twice): once.
                        log.info("decision_again decision_id=%s", message.decision_id)
                        with contextlib.suppress(nats.errors.Error):
                            await msg.ack()
                        continue
                    yield Delivery(message, msg, self.options.redelivery_delay, self._acknowledged)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def handle_decisions(
        self, handler: DecisionHandler, on_refusal: RefusalHandler | None = None
    ) -> None:
        """Run `handler` on each decision and `on_refusal` on each refusal of the runner's
        events, one at a time in the order published, until `drain` or `close`: acknowledged
        when it returns, delivered again after `redelivery_delay` when it raises.

        Without `on_refusal` a refusal is logged (`event_refused`, a warning) and acknowledged;
        the runner then never learns that its report got no decision, so pass one: with
        `quota_exceeded`, `report_again` sends the report again at `not_before`."""
        async for delivery in self.decisions():
            message = delivery.message
            try:
                if isinstance(message, Decision):
                    await handler(message)
                elif on_refusal is not None:
                    await on_refusal(message)
                else:
                    log.warning(
                        "event_refused run_id=%s attempt=%d event_id=%s code=%s",
                        message.run_id,
                        message.attempt,
                        message.event_id,
                        message.code,
                    )
            except Exception as exc:
                log.warning(
                    "decision_handler_failed %s error_type=%s",
                    f"decision_id={message.decision_id}"
                    if isinstance(message, Decision)
                    else f"refused_event_id={message.event_id}",
                    type(exc).__name__,
                )
                with contextlib.suppress(nats.errors.Error):
                    await delivery.nak()
                continue
            with contextlib.suppress(nats.errors.Error):
                await delivery.ack()

    async def _ensure_decisions_consumer(self) -> None:
        """Look the consumer `<runner_id>` up and create it when missing. A connection that may
        do neither (the shipped authorization: an operator creates it with `continuity runners
        add RUNNER_ID --consumer-only`) binds it as it is."""
        stream, name = subjects.DECISIONS_STREAM, self.runner_id
        info_subject = f"$JS.API.CONSUMER.INFO.{stream}.{name}"
        try:
            await self._denials.guard(info_subject, self._js.consumer_info(stream, name))
            return
        except PermissionDenied:
            return
        except nats.js.errors.NotFoundError:
            pass
        except (nats.errors.Error, TimeoutError) as exc:
            raise Unavailable(f"the consumer could not be looked up ({type(exc).__name__})") from None
        wanted = subjects.decisions(self.runner_id)
        config = ConsumerConfig(
            name=name,
            durable_name=name,
            filter_subject=wanted,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            max_deliver=-1,
        )
        create_subject = f"$JS.API.CONSUMER.CREATE.{stream}.{name}.{wanted}"
        try:
            await self._denials.guard(create_subject, self._js.add_consumer(stream, config))
        except PermissionDenied:
            raise NotFound(f"no consumer {name} on {stream}, and not permitted to create it") from None
        except nats.js.errors.NotFoundError:
            raise NotFound(f"no stream {stream}: are the services running?") from None
        except (nats.errors.Error, TimeoutError) as exc:
            raise Unavailable(f"the consumer could not be created ({type(exc).__name__})") from None
        log.info("decision_consumer_created runner_id=%s", name)

    # ---- the archiver's remote move (contract section 5) ------------------------------------

    async def serve_archive(self, handler: ArchiveHandler) -> None:
        """Answer `continuity.runner.<runner_id>.archive` with `handler` until `drain`/`close`.

        The handler moves the saved state of the request's session aside and returns an
        `ArchiveResult` (exit code 0 only when it did). A handler that raises answers exit code
        1 with the exception's type only; an undecodable request answers exit code 2. It
        returns once the server holds the subscription (when connected): a request sent after
        it reaches the handler.
        """
        if self._archive_sub is not None:
            raise RuntimeError("serve_archive was already called")

        async def on_request(msg: Msg) -> None:
            task = asyncio.create_task(self._answer_archive(msg, handler))
            self._archive_tasks.add(task)
            task.add_done_callback(self._archive_tasks.discard)

        self._archive_sub = await self._nc.subscribe(subjects.archive(self.runner_id), cb=on_request)
        # A round trip: the subscription is at the server before this returns. When NATS is
        # away it is sent again on reconnection, and the archiver asks again meanwhile.
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await self._nc.flush(timeout=max(1, int(self.options.request_timeout)))

    async def _answer_archive(self, msg: Msg, handler: ArchiveHandler) -> None:
        if not msg.reply:
            return
        # What the handler does continues the archiver's trace (`tracing.incoming()`).
        tracing._incoming.set(tracing.header_value(msg.headers))
        try:
            request = _archive_request.decode(msg.data)
        except msgspec.MsgspecError:
            result = ArchiveResult(exit_code=2, output="not a contract archive request")
        else:
            try:
                result = await handler(request)
                if not isinstance(result, ArchiveResult):
                    raise TypeError("the archive handler must return an ArchiveResult")
            except Exception as exc:
                # The type only: an exception's text may carry paths or secrets.
                log.warning(
                    "archive_handler_failed run_id=%s error_type=%s", request.run_id, type(exc).__name__
                )
                result = ArchiveResult(exit_code=1, output=f"archive handler failed ({type(exc).__name__})")
        answer = _encode(archive_answer(result))
        with contextlib.suppress(nats.errors.Error):
            await msg.respond(answer)

    # ---- life -------------------------------------------------------------------------------

    async def drain(self) -> None:
        """Stop taking work, answer the archive requests in hand, then close."""
        self._closing = True
        if self._archive_tasks:
            await asyncio.wait(set(self._archive_tasks), timeout=30)
        if not self._nc.is_closed:
            with contextlib.suppress(nats.errors.Error):
                await self._nc.drain()

    async def close(self) -> None:
        """Close at once; work in hand is dropped (decisions not acknowledged are redelivered)."""
        self._closing = True
        for task in list(self._archive_tasks):
            task.cancel()
        if not self._nc.is_closed:
            await self._nc.close()

    async def __aenter__(self) -> Runner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _message(data: bytes) -> Decision | Refusal | None:
    """A message of the decisions subject as its `type` says, or None when it is neither a
    contract decision nor a refusal (a newer kind is skipped, never mistaken for one)."""
    try:
        kind = _kind.decode(data).type
        if kind == "decision":
            return _decision.decode(data)
        if kind == "refusal":
            return _refusal.decode(data)
    except msgspec.MsgspecError:
        pass
    return None


async def _until(not_before: str | None) -> None:
    """Wait until `not_before` (an RFC 3339 time; None or unreadable: at once)."""
    if not not_before:
        return
    try:
        at = datetime.fromisoformat(not_before.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return
    delay = at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)  # the contract's "at or after not_before"
