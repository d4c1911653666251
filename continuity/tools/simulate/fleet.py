"""The fleet: N simulated runners, the operator, a dead-letter watcher and an outcome watcher
against one Continuity stack. It starts runs at a steady rate, waits until every expected
decision and outcome arrived or its deadline passed, then holds the services' judgment of the
outcomes (`continuity.runs.list`, `continuity.runs.stats`) against what the runners know, and
returns what happened for the report."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import secrets
import time
from collections.abc import Callable

import msgspec
import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from continuity.cli.connect import redacted_url
from continuity.tools.simulate.checker import Checker, Contradiction
from continuity.tools.simulate.operator import SimOperator
from continuity.tools.simulate.outcomes import Comparison, RowKey, ServerRow, compare
from continuity.tools.simulate.result import Judgement, Result, Settings
from continuity.tools.simulate.runner import TENANT, NotIssued, RunnerSettings, SimRunner, Story
from continuity.tools.simulate.scenarios import Mix
from shared.contract import GetRequest, SessionRef, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.decisions import RunOutcome
from shared.contract.limits import REPLAY_MAX_SINCE_S
from shared.contract.runs import RunsListRequest, RunsStatsRequest
from shared.contract.times import rfc3339_from_epoch
from shared.platform.bus.connection import server_list
from shared.platform.bus.publish import DEAD_REASON_HEADER
from shared.platform.tls import nats_context_from_env


async def quiet(exc: Exception) -> None:
    """NATS client errors surface as failed requests; the client's own tracebacks are noise."""


POLL_S = 0.2
"""How often the final statuses are asked again while the runs index catches up."""


class FleetError(Exception):
    """The stack cannot be simulated against (unreachable, or a service is missing)."""


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
        self._wall_start = time.time()

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
        self._nc = await self._connect()
        background: list[asyncio.Task[None]] = []
        operator_stop = asyncio.Event()
        try:
            return await self._simulate(stop, operator_stop, background, progress, on_story)
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

    async def _connect(self) -> Client:
        url = self.settings.nats_url
        try:
            tls = nats_context_from_env(url)  # TLS as the services use it
            return await nats.connect(
                servers=server_list(url),
                name="continuity-sim",
                connect_timeout=5,
                max_reconnect_attempts=3,
                error_cb=quiet,
                tls=tls,
                tls_handshake_first=tls is not None,
            )
        except Exception as exc:
            raise FleetError(
                f"cannot connect to NATS at {redacted_url(url)} ({type(exc).__name__})"
            ) from None

    async def _simulate(
        self,
        stop: asyncio.Event,
        operator_stop: asyncio.Event,
        background: list[asyncio.Task[None]],
        progress: Progress | None,
        on_story: Callable[[Story], None] | None,
    ) -> Result:
        """The simulation proper; the tasks it starts go into `background`, for `run` to cancel."""
        assert self._nc is not None
        s = self.settings
        client = ContinuityClient(self._nc, timeout=10.0)
        await self._preflight(client)
        self._operator = SimOperator(
            client, self.checker, random.Random(self.rng.random()), wait_s=s.deadline_s, acting=s.operator
        )
        reconciliation = await self._operator.probe()
        if not reconciliation:
            self.warnings.append(
                "no reconciliation service answers: operator stops are not followed up, and the "
                "outcomes are not judged"
            )
        watched = await self._watch_dead_letters()
        self.checker.watch_dead_letters = watched
        self.checker.watch_outcomes = await self._watch_outcomes()
        await self._start_runners()
        background.append(asyncio.create_task(self._operator.run(operator_stop)))
        if progress is not None:
            background.append(asyncio.create_task(self._report_progress(progress, stop)))
        self.started_at = time.monotonic()
        self._wall_start = time.time()
        tasks = await self._load(stop, on_story)
        load_s = time.monotonic() - self.started_at
        interrupted = await self._drain(tasks, stop)
        judgement = None
        if not interrupted:
            self.checker.overdue(now=math.inf)
            if reconciliation:
                judgement = await self._judge(client, stop)
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
            judgement=judgement,
            prefix=self.prefix,
        )

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

    async def _watch_outcomes(self) -> bool:
        """Outcomes recorded for the simulation's runs, as the runs index reads them (4.6)."""
        assert self._nc is not None

        async def on_outcome(msg: Msg) -> None:
            try:
                outcome = msgspec.json.decode(msg.data, type=RunOutcome)
            except msgspec.MsgspecError:
                return  # not an outcome of this release
            self.checker.outcome(outcome)

        try:
            await self._nc.jetstream().subscribe(
                subjects.outcomes("*"),
                stream=subjects.DECISIONS_STREAM,
                cb=on_outcome,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
            )
        except nats.errors.Error:
            self.warnings.append("outcomes cannot be watched: recorded turns are not confirmed")
            return False
        return True

    async def _judge(self, client: ContinuityClient, stop: asyncio.Event) -> Judgement:
        """Once every run ended: `continuity.runs.list` must show each run whose turn was recorded
        with its final status, and `continuity.runs.stats` must judge every decision as its runner
        saw it follow. The runs index follows the decisions stream, so the listing is asked
        again (every `POLL_S`) until it shows that or `deadline_s` passed."""
        final = self.checker.final_statuses()
        decided = {
            run_id
            for run_id, run in self.checker.runs.items()
            if any(st.first is not None or st.continued is not None for st in run.attempts.values())
        }
        due = time.monotonic() + self.settings.deadline_s
        shown: dict[str, str] = {}
        while True:
            try:
                shown = await self._listed(client)
            except (RequestError, nats.errors.Error, TimeoutError) as exc:
                self.warnings.append(f"runs list failed ({type(exc).__name__}): final statuses not checked")
                break
            settled = decided <= set(shown) and all(shown.get(r) == s for r, s in final.items())
            if settled or time.monotonic() >= due or stop.is_set():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)
        unsettled = [(r, shown.get(r), s) for r, s in sorted(final.items()) if shown.get(r) != s]
        for run_id, status, want in unsettled:
            self.checker.note(
                run_id,
                f"runs list shows {status or 'no entry'} after its turn was recorded; expected {want}",
            )
        statuses: dict[str, int] = {}
        for status in shown.values():
            statuses[status] = statuses.get(status, 0) + 1
        comparison = await self._stats(client)
        return Judgement(comparison, dict(sorted(statuses.items())), unsettled)

    async def _listed(self, client: ContinuityClient) -> dict[str, str]:
        """The simulation's runs in `continuity.runs.list`, with their status."""
        req = RunsListRequest(
            tenant=TENANT, updated_after=rfc3339_from_epoch(self._wall_start - 60), limit=1000
        )
        shown: dict[str, str] = {}
        while True:
            page = await client.runs(req)
            for entry in page.items:
                if entry.run_id.startswith(f"{self.prefix}-"):
                    shown[entry.run_id] = entry.status
            if page.next_cursor is None:
                return shown
            req.cursor = page.next_cursor

    async def _stats(self, client: ContinuityClient) -> Comparison | None:
        """`continuity.runs.stats` over the simulation's decisions (its rows name a harness
        version carrying the run prefix), held against the runners' truth."""
        since_s = min(REPLAY_MAX_SINCE_S, time.time() - self._wall_start + 300)
        try:
            reply = await client.runs_stats(RunsStatsRequest(tenant=TENANT, since_s=since_s))
        except (RequestError, nats.errors.Error, TimeoutError) as exc:
            self.warnings.append(f"runs stats failed ({type(exc).__name__}): outcomes not judged")
            return None
        if reply.truncated:
            self.warnings.append("runs stats read too many runs: its counts are cut short")
        mine = f"+{self.prefix}"
        server: dict[RowKey, ServerRow] = {
            (r.rule, r.action, r.failure_class, r.harness, r.harness_version): ServerRow(
                r.recovered, r.failed, r.abandoned, r.held, r.pending
            )
            for r in reply.rows
            if r.harness_version.endswith(mine)
        }
        comparison = compare(self.checker.truth, server)
        for row in comparison.disagreements:
            rule, action, failure_class, harness, _ = row.key
            said = (
                "no row"
                if row.server is None
                else f"recovered {row.server.recovered}, failed {row.server.failed}, abandoned "
                f"{row.server.abandoned}, held {row.server.held}, pending {row.server.pending}"
            )
            knew = ", ".join(f"{k} {v}" for k, v in row.runners.items())
            text = f"row {rule} {action} {failure_class} {harness}: runs stats says {said}; "
            text += f"the runners saw {knew}"
            self.checker.contradictions.append(
                Contradiction("runs.stats", ",".join(row.scenarios) or "?", text)
            )
        return comparison

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
            scenario = mix.draw()
            task = asyncio.create_task(runner.play(scenario, n, random.Random(self.rng.random())))
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
