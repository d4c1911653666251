"""The fleet: N simulated runners, the operator and a dead-letter watcher against one Continuity
stack. It starts runs at a steady rate, waits until every expected outcome arrived or its
deadline passed, and returns what happened for the report."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from continuity.cli.connect import redacted_url
from continuity.tools.simulate.checker import Checker
from continuity.tools.simulate.keys import DEMO_KEYS
from continuity.tools.simulate.operator import SimOperator
from continuity.tools.simulate.runner import TENANT, NotIssued, RunnerSettings, SimRunner, Story
from continuity.tools.simulate.scenarios import DEFAULT_MIX, Mix, parse_mix
from shared.contract import GetRequest, SessionRef, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.platform.bus.connection import server_list
from shared.platform.bus.publish import DEAD_REASON_HEADER
from shared.platform.tls import nats_context_from_env


async def quiet(exc: Exception) -> None:
    """NATS client errors surface as failed requests; the client's own tracebacks are noise."""


class FleetError(Exception):
    """The stack cannot be simulated against (unreachable, or a service is missing)."""


@dataclass
class Settings:
    runners: int = 4
    events: int | None = 200
    """Runs to start (each begins with one resume failure; retries add events). None: --seconds."""
    seconds: float | None = None
    rate: float = 50.0
    """Runs started per second, across the fleet."""
    mix: dict[str, int] = field(default_factory=lambda: parse_mix(DEFAULT_MIX))
    archive_fail_rate: float = 0.1
    archive_timeout_rate: float = 0.05
    seed: int | None = None
    nats_url: str = "nats://127.0.0.1:4222"
    keys: dict[str, bytes] = field(default_factory=lambda: dict(DEMO_KEYS))
    deadline_s: float = 20.0
    """How long after an event (or an operator's step) its decision may take."""
    archive_timeout_s: float = 30.0
    """The archiver's CONTINUITY_ARCHIVE_TIMEOUT_S: an unanswered archive takes this long."""
    settle_s: float = 0.5
    """Listening after the last expected outcome, for late second decisions."""
    operator: bool = True
    """False: the simulated operator does nothing, so that a person can resolve by hand."""


@dataclass
class Result:
    settings: Settings
    checker: Checker
    stories: list[Story]
    published: int
    load_s: float
    elapsed_s: float
    operator_present: bool
    operator_acts: dict[str, int]
    dead_letters_watched: bool
    interrupted: bool
    warnings: list[str]

    @property
    def ok(self) -> bool:
        return not self.checker.contradictions


Progress = Callable[[float, "Fleet"], None]


class Fleet:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.prefix = f"sim{secrets.token_hex(3)}"  # run ids never repeat across simulations
        self.rng = random.Random(settings.seed)
        self.checker = Checker(
            self.prefix, deadline_s=settings.deadline_s, archive_timeout_s=settings.archive_timeout_s
        )
        self.runners: list[SimRunner] = []
        self.stories: list[Story] = []
        self.started_at = time.monotonic()
        self.warnings: list[str] = []
        self._nc: Client | None = None
        self._operator: SimOperator | None = None

    @property
    def published(self) -> int:
        return sum(r.published for r in self.runners)

    async def run(
        self,
        stop: asyncio.Event | None = None,
        *,
        progress: Progress | None = None,
        on_story: Callable[[Story], None] | None = None,
    ) -> Result:
        stop = stop or asyncio.Event()
        s = self.settings
        try:
            tls = nats_context_from_env(s.nats_url)  # TLS as the services use it
            self._nc = await nats.connect(
                servers=server_list(s.nats_url),
                name="continuity-sim",
                connect_timeout=5,
                max_reconnect_attempts=3,
                error_cb=quiet,
                tls=tls,
                tls_handshake_first=tls is not None,
            )
        except Exception as exc:
            raise FleetError(
                f"cannot connect to NATS at {redacted_url(s.nats_url)} ({type(exc).__name__})"
            ) from None
        background: list[asyncio.Task[None]] = []
        operator_stop = asyncio.Event()
        try:
            client = ContinuityClient(self._nc, timeout=10.0)
            await self._preflight(client)
            self._operator = SimOperator(
                client, self.checker, random.Random(self.rng.random()), wait_s=s.deadline_s, acting=s.operator
            )
            if not await self._operator.probe():
                self.warnings.append("no reconciliation service answers: operator stops are not followed up")
            watched = await self._watch_dead_letters()
            self.checker.watch_dead_letters = watched
            await self._start_runners()
            background.append(asyncio.create_task(self._operator.run(operator_stop)))
            if progress is not None:
                background.append(asyncio.create_task(self._report_progress(progress, stop)))
            self.started_at = time.monotonic()
            tasks = await self._load(stop, on_story)
            load_s = time.monotonic() - self.started_at
            interrupted = await self._drain(tasks, stop)
            if not interrupted:
                self.checker.overdue(now=math.inf)
            return Result(
                settings=s,
                checker=self.checker,
                stories=self.stories,
                published=self.published,
                load_s=load_s,
                elapsed_s=time.monotonic() - self.started_at,
                operator_present=self._operator.present,
                operator_acts=dict(self._operator.acts),
                dead_letters_watched=watched,
                interrupted=interrupted,
                warnings=self.warnings,
            )
        finally:
            operator_stop.set()
            for task in background:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for runner in self.runners:
                await runner.stop()
            with contextlib.suppress(Exception):
                await self._nc.close()

    async def _preflight(self, client: ContinuityClient) -> None:
        assert self._nc is not None
        js = self._nc.jetstream()
        try:
            await js.consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
        except NotFoundError:
            raise FleetError(
                "no classifier consumer on CONTINUITY_EVENTS: is the classifier running?"
            ) from None
        except nats.errors.Error as exc:
            raise FleetError(f"JetStream is not available ({type(exc).__name__})") from None
        try:
            await js.consumer_info(subjects.WORK_STREAM, subjects.ARCHIVER_CONSUMER)
        except NotFoundError:
            self.warnings.append("no archiver consumer: replacements will be reported as never arriving")
        probe = SessionRef(tenant="sim", conversation_id=f"{self.prefix}-probe", agent_id="codex")
        try:
            await client.get(GetRequest(session=probe))
        except RequestError:
            pass  # 404 not_found: the session-store answers
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            raise FleetError("no session-store answers continuity.sessions.get") from None

    async def _watch_dead_letters(self) -> bool:
        assert self._nc is not None

        async def on_dead(msg: Msg) -> None:
            reason = (msg.headers or {}).get(DEAD_REASON_HEADER, "")
            run_id = self.checker.dead_letter(msg.subject, reason, msg.data)
            run = self.checker.runs.get(run_id) if run_id else None
            if run_id is not None and run is not None:
                for runner in self.runners:
                    if runner.runner_id == run.runner_id:
                        runner.dead_letter(run_id, msg.subject, reason)

        try:
            await self._nc.jetstream().subscribe(
                subjects.DEAD_ALL,
                stream=subjects.DEAD_STREAM,
                cb=on_dead,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
            )
        except nats.errors.Error:
            self.warnings.append("dead letters cannot be watched: quarantines are not confirmed")
            return False
        return True

    async def _start_runners(self) -> None:
        s = self.settings
        wait_s = s.deadline_s + s.archive_timeout_s
        settings = RunnerSettings(s.keys, s.archive_fail_rate, s.archive_timeout_rate, wait_s)
        assert self._operator is not None
        for i in range(s.runners):
            runner = SimRunner(
                f"sim-r{i + 1:02d}",
                s.nats_url,
                self.prefix,
                settings,
                self.checker,
                self._operator.handle,
                random.Random(self.rng.random()),
            )
            await runner.start()
            self.runners.append(runner)
            try:
                await runner.probe(self.prefix)
            except NotIssued:
                raise FleetError(
                    f"the session-store refuses {runner.runner_id}'s sessions of tenant {TENANT}: tenancy "
                    f"is enforced and the simulated runners are not issued (continuity runners add "
                    f"{runner.runner_id} --tenant {TENANT}, for each, or services with "
                    "CONTINUITY_TENANCY=open)"
                ) from None

    async def _load(
        self, stop: asyncio.Event, on_story: Callable[[Story], None] | None
    ) -> set[asyncio.Task[Story]]:
        s = self.settings
        mix = Mix(s.mix, self.rng)
        tasks: set[asyncio.Task[Story]] = set()
        loop = asyncio.get_running_loop()
        start = loop.time()
        n = 0
        while not stop.is_set():
            if s.events is not None and n >= s.events:
                break
            if s.seconds is not None and loop.time() - start >= s.seconds:
                break
            runner = self.runners[n % len(self.runners)]
            task = asyncio.create_task(runner.play(mix.draw(), n))
            tasks.add(task)
            if on_story is not None:
                task.add_done_callback(lambda t: t.cancelled() or t.exception() or on_story(t.result()))
            n += 1
            delay = start + n / s.rate - loop.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)  # paces the rate; wakes on stop
        self.stories = [story for r in self.runners for story in r.stories]
        return tasks

    async def _drain(self, tasks: set[asyncio.Task[Story]], stop: asyncio.Event) -> bool:
        """Wait for every run to end and every expectation to be met or overdue; True if stopped."""
        pending = {t for t in tasks if not t.done()}
        while pending and not stop.is_set():
            _, pending = await asyncio.wait(pending, timeout=0.2)
            self.checker.overdue()
        while self.checker.outstanding() and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
            self.checker.overdue()
        if not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.settle_s)
        for task in pending:
            task.cancel()
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                self.checker.note("?", f"a simulated run crashed: {type(exc).__name__}: {exc}")
        self.stories = [story for r in self.runners for story in r.stories]
        return stop.is_set()

    async def _report_progress(self, progress: Progress, stop: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(1.0)  # the progress line's period
            self.checker.overdue()
            progress(time.monotonic() - self.started_at, self)


def stderr_progress(elapsed: float, fleet: Fleet) -> None:
    from continuity.tools.simulate.report import progress_line

    print(progress_line(elapsed, fleet.published, fleet.checker), file=sys.stderr, flush=True)
