"""The partition suite's runner load and what it measures: resume failures published as runners
publish them (again with the same id until JetStream acknowledges), the decisions they get, and
session commits, decides, rejects and gets recorded as a history for the linearizability
checker (continuity/tools/linearizability.py)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from continuity.tools.linearizability import (
    UNKNOWN,
    Answer,
    Call,
    Commit,
    Committed,
    Decide,
    Decided,
    Get,
    Op,
    Record,
    Refused,
    Reject,
    Rejected,
    Seen,
    check,
)
from shared.contract import SessionRef, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.events import ResumeFailed
from shared.contract.sessions import CommitRequest, DecideRequest, GetRequest, RejectRequest
from tests.support.cluster import read_settled
from tests.support.runner import resume_failed
from tests.support.waiting import wait_for

REFUSALS = frozenset({"revision_conflict", "stale_epoch", "session_held"})
"""Commit refusals: definite answers, nothing written. Any other error is an unknown outcome."""
CWD = "/workspaces/chaos"
SEARCH_BUDGET = 100_000
"""States the linearizability search visits per session before it gives up (undecided)."""
PUBLISH_GIVE_UP_S = 90.0
"""A runner stops re-sending an event this long after its first try (then it was not stored)."""
RESEND_AFTER_S = 20.0
"""A runner sends a report again, with a new event_id (the SDKs' `resend`), when no decision
came this long after it was acknowledged, and again after as long each time: above the longest
pause in decisions seen under the faults (19.5 s), so that a report is sent again mostly when
the system lost it, not while it is still coming."""


# Events and decisions ------------------------------------------------------------------------


class EventLoad:
    """`rate` events a second of one runner, each of a run of its own, spread over `conns`."""

    def __init__(self, conns: list[Client], runner: str, rate: float, tenant: str = "acme") -> None:
        self.conns = conns
        self.runner = runner
        self.rate = rate
        self.tenant = tenant
        """Whose sessions fail: a tenant of its own keeps a load clear of another's recovery budget."""
        self.sent: list[str] = []
        self.acked: set[str] = set()
        self.resent: Counter[str] = Counter()
        """Reports sent again (a new event_id) for want of a decision, per run."""
        self.first_resent_at: dict[str, float] = {}
        """When each run's report was first sent again (epoch seconds)."""
        self._due: dict[str, float] = {}
        """When each acknowledged, undecided report is sent again (monotonic seconds)."""
        self._decided: set[str] = set()
        self._events: dict[str, ResumeFailed] = {}
        self._publishers: set[asyncio.Task[None]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        started = time.monotonic()
        while not stop.is_set():
            run_id = f"run-{uuid.uuid4().hex[:16]}"
            self.sent.append(run_id)
            session = SessionRef(tenant=self.tenant, conversation_id=f"conv-{run_id}", agent_id="codex")
            self._events[run_id] = resume_failed(self.runner, run_id=run_id, session=session)
            self._spawn(self._publish(run_id, len(self.sent)))
            # The load's own pace: the next event is due at its slot, whatever the last cost.
            await asyncio.sleep(max(0.0, started + len(self.sent) / self.rate - time.monotonic()))
        await asyncio.gather(*list(self._publishers))

    async def follow(self, done: asyncio.Event) -> None:
        """The runner's side of its reports until `done`: the decisions it receives (on every
        connection), and a report sent again when none came within `RESEND_AFTER_S`."""
        subs = [await nc.subscribe(subjects.decisions(self.runner), cb=self._received) for nc in self.conns]
        try:
            while not done.is_set():
                now = time.monotonic()
                for run_id, due in list(self._due.items()):
                    if run_id in self._decided:
                        del self._due[run_id]
                    elif now >= due:
                        self._due[run_id] = now + RESEND_AFTER_S
                        self.resent[run_id] += 1
                        self.first_resent_at.setdefault(run_id, time.time())
                        n = len(self.sent) + self.resent.total()  # the next connection in turn
                        self._spawn(self._publish(run_id, n, again=True))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 1.0)  # the runner's own pace of checking
        finally:
            for sub in subs:
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()
            await asyncio.gather(*list(self._publishers))

    async def _received(self, msg: Msg) -> None:
        with contextlib.suppress(msgspec.DecodeError, KeyError, TypeError):
            decided = msgspec.json.decode(msg.data)
            if decided["type"] == "decision":
                self._decided.add(decided["run_id"])

    def _spawn(self, publication: Awaitable[None]) -> None:
        task = asyncio.ensure_future(publication)
        self._publishers.add(task)
        task.add_done_callback(self._publishers.discard)

    async def _publish(self, run_id: str, n: int, *, again: bool = False) -> None:
        e = self._events[run_id]
        if again:  # the same report, only the id new: the stream's duplicate window keeps it
            e = msgspec.structs.replace(e, event_id=uuid.uuid4().hex)
        data = msgspec.json.encode(e)
        subject = subjects.event(self.runner, "resume_failed")
        deadline = time.monotonic() + PUBLISH_GIVE_UP_S
        tries = 0
        while time.monotonic() < deadline:
            js = self.conns[(n + tries) % len(self.conns)].jetstream()
            tries += 1
            try:
                await js.publish(subject, data, timeout=2, headers={"Nats-Msg-Id": e.event_id})
            except (nats.errors.Error, TimeoutError, OSError):
                await asyncio.sleep(0.2)  # a runner's backoff before it sends again
                continue
            if not again:
                self.acked.add(run_id)
                self._due[run_id] = time.monotonic() + RESEND_AFTER_S
            return


@dataclass
class Decisions:
    per_run: Counter[tuple[str, int]]
    stored_at: list[float]
    """When the decisions stream stored each decision (epoch seconds), sorted."""
    first_at: dict[str, float] = field(default_factory=dict)
    """When the decisions stream stored each run's first decision (epoch seconds)."""


async def read_decisions(nc: Client, runner: str) -> Decisions:
    msgs = await read_settled(nc.jetstream(), subjects.DECISIONS_STREAM, subjects.decisions(runner))
    per_run: Counter[tuple[str, int]] = Counter()
    times = []
    first_at: dict[str, float] = {}
    for m in msgs:
        d = msgspec.json.decode(m.data)
        per_run[(d["run_id"], d["attempt"])] += 1
        if m.time is not None:
            times.append(m.time.timestamp())
            first_at.setdefault(d["run_id"], m.time.timestamp())
    return Decisions(per_run, sorted(times), first_at)


async def wait_all_decided(nc: Client, runner: str, runs: set[str], timeout: float) -> Decisions:
    got: list[Decisions] = []

    async def decided() -> bool:
        got[:] = [await read_decisions(nc, runner)]
        return all((r, 1) in got[0].per_run for r in runs)

    try:
        await wait_for(decided, timeout=timeout, interval=1.0, what=f"decisions of {len(runs)} runs")
    except AssertionError:
        pass  # what is missing is counted as lost by the caller
    return got[0] if got else await read_decisions(nc, runner)


async def stored_runs(nc: Client, runner: str) -> dict[str, int]:
    """The run ids of `runner`'s events the events stream holds, each with the sequence of its
    first copy (a report sent again is stored again, later)."""
    msgs = await read_settled(nc.jetstream(), subjects.EVENTS_STREAM, subjects.event(runner, "resume_failed"))
    stored: dict[str, int] = {}
    for m in msgs:
        stored.setdefault(msgspec.json.decode(m.data)["run_id"], int(m.seq or 0))
    return stored


async def classifier_consumer_state(nc: Client) -> str:
    """What the classifier's consumer says of itself: where its deliveries and acknowledgements
    stand, and what it still holds (for an undecided event's report)."""
    try:
        info = await nc.jetstream().consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
    except (nats.errors.Error, TimeoutError) as exc:
        return f"consumer info unavailable ({type(exc).__name__})"
    delivered = info.delivered.stream_seq if info.delivered else None
    floor = info.ack_floor.stream_seq if info.ack_floor else None
    return (
        f"consumer: delivered up to {delivered}, ack floor {floor}, pending {info.num_pending}, "
        f"ack pending {info.num_ack_pending}, redelivered {info.num_redelivered}"
    )


async def recorded_runs(nc: Client, run_ids: list[str]) -> set[str]:
    """Those of `run_ids` whose run the services recorded (`continuity.runs.audit` answers)."""
    client = ContinuityClient(nc, timeout=5)
    found: set[str] = set()
    for run_id in run_ids:
        try:
            await client.audit(run_id)
        except (RequestError, TimeoutError, nats.errors.Error):
            continue
        found.add(run_id)
    return found


def longest_pause(stored_at: list[float], since: float) -> float:
    """The longest time without a new decision from `since` (the fault) to the last decision."""
    later = [since, *(t for t in stored_at if t >= since)]
    return max((b - a for a, b in itertools.pairwise(later)), default=0.0)


# Sessions ---------------------------------------------------------------------------------


def session_on(slot_of: Callable[[SessionRef], bool], tag: str, count: int) -> list[SessionRef]:
    """`count` sessions for which `slot_of` holds (those on one Redis master, say)."""
    found = []
    for i in range(100_000):
        s = SessionRef(tenant="acme", conversation_id=f"chaos-{tag}-{i}", agent_id="codex")
        if slot_of(s):
            found.append(s)
            if len(found) == count:
                return found
    raise AssertionError("no such sessions")


Reader = Callable[[SessionRef], Awaitable[Record | None]]
"""A get of one session that bypasses the session-store (the planted stale read)."""


class SessionLoad:
    """`workers` concurrent clients per session, each a loop of commits, decides, rejects and
    gets, every operation recorded with its invocation, its answer and the answer's time."""

    def __init__(
        self,
        clients: list[ContinuityClient],
        sessions: list[SessionRef],
        workers: int = 3,
        *,
        reader: Reader | None = None,
        seed: int = 1,
    ) -> None:
        self.clients = clients
        self.sessions = sessions
        self.workers = workers
        self.reader = reader
        self.history: dict[str, list[Op]] = defaultdict(list)
        self.rng = random.Random(seed)
        self.undelivered = 0
        """Requests the connected NATS node answered "no responders": no operation of the history."""

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(
            *(
                self._worker(s, w, self.clients[(i * self.workers + w) % len(self.clients)], stop)
                for i, s in enumerate(self.sessions)
                for w in range(self.workers)
            )
        )

    async def _worker(
        self, session: SessionRef, w: int, client: ContinuityClient, stop: asyncio.Event
    ) -> None:
        rng = random.Random(self.rng.random())
        last: Record | None = None
        n = 0
        while not stop.is_set():
            n += 1
            roll = rng.random()
            call: Call
            if roll < 0.4:
                expected = last.revision if (last is not None and rng.random() < 0.5) else None
                call = Commit(f"h-{w}-{n}-{uuid.uuid4().hex[:6]}", expected_revision=expected)
            elif roll < 0.5 and last is not None:
                call = Reject(last.handle)
            elif roll < 0.75:
                call = Get()
            else:
                call = Decide()
            invoked = time.monotonic()
            answer = await self._send(client, session, call)
            completed = time.monotonic()
            if answer is None:
                self.undelivered += 1
            else:
                self.history[session.key].append(Op(call, answer, invoked, completed, client=f"w{w}"))
            if isinstance(answer, Seen):
                last = answer.record
            elif isinstance(answer, Committed) and isinstance(call, Commit):
                last = Record(call.handle, answer.revision, answer.epoch)
            await asyncio.sleep(rng.uniform(0.01, 0.05))  # a runner's think time between requests

    async def _send(self, client: ContinuityClient, session: SessionRef, call: Call) -> Answer | None:
        """The answer, UNKNOWN when none came, None when the request reached no session-store."""
        try:
            if isinstance(call, Commit):
                reply = await client.commit(
                    CommitRequest(
                        session=session,
                        native_session_id=call.handle,
                        adapter="codex",
                        model="gpt-5-codex",
                        cwd=CWD,
                        cursor="c-1",
                        checkpoint_policy="same_session_only",
                        expected_revision=call.expected_revision,
                    )
                )
                return Committed(reply.revision, reply.epoch)
            if isinstance(call, Reject):
                cleared = await client.reject(
                    RejectRequest(
                        session=session, native_session_id=call.handle, code="resume_target_missing"
                    )
                )
                return Rejected(cleared.cleared)
            if isinstance(call, Decide):
                d = await client.decide(
                    DecideRequest(
                        session=session, adapter="codex", model="gpt-5-codex", cwd=CWD, latest_cursor="c-1"
                    )
                )
                return Decided(d.mode, d.resume_session_id, d.revision, d.epoch)
            if self.reader is not None:
                return Seen(await self.reader(session))
            view = await client.get(GetRequest(session=session))
            return Seen(Record(view.native_session_id, view.revision, view.epoch, view.state))
        except RequestError as err:
            if isinstance(call, Commit) and err.code in REFUSALS:
                return Refused(err.code)
            if isinstance(call, Get) and err.code == "not_found":
                return Seen(None)
            return UNKNOWN
        except nats.errors.NoRespondersError:
            # The node knew no subscriber (across a partition of the NATS nodes, say): the
            # request was delivered to none, so it cannot have taken effect.
            return None
        except Exception:  # a timeout, a lost connection, a read that failed: no answer seen
            return UNKNOWN


def observed_revision(op: Op) -> int | None:
    a = op.answer
    if isinstance(a, Committed):
        return a.revision
    if isinstance(a, Seen):
        return a.record.revision if a.record else 0
    if isinstance(a, Decided):
        return a.revision or 0
    return None


def reverted_reads(ops: list[Op]) -> int:
    """Answers showing a revision below one an answer completed before their invocation showed:
    the record went back to an older revision."""
    seen = sorted((op.completed, r) for op in ops if (r := observed_revision(op)) is not None)
    ends = [c for c, _ in seen]
    highest: list[int] = []
    for _, r in seen:
        highest.append(max(r, highest[-1]) if highest else r)
    count = 0
    for op in ops:
        r = observed_revision(op)
        i = bisect.bisect_left(ends, op.invoked)
        if r is not None and i > 0 and r < highest[i - 1]:
            count += 1
    return count


def lost_commits(ops: list[Op]) -> int:
    """Acknowledged commits whose revision was acknowledged again later for another commit: the
    first was written where a failover forgot it."""
    by_revision: dict[int, list[Op]] = defaultdict(list)
    for op in ops:
        if isinstance(op.answer, Committed):
            by_revision[op.answer.revision].append(op)
    return sum(len(group) - 1 for group in by_revision.values())


# One fault, measured ------------------------------------------------------------------------


@dataclass
class Measured:
    fault: str
    sent: int = 0
    acked: int = 0
    decided: int = 0
    lost: int = 0
    doubled: int = 0
    pause_s: float = 0.0
    resumed_s: float = 0.0
    """From the heal to the first decision stored after it."""
    ops: int = 0
    unknown: int = 0
    sessions_not_linearizable: int = 0
    reverted: int = 0
    lost_commits: int = 0
    resent: int = 0
    """Acknowledged reports the runner sent again for want of a decision (RESEND_AFTER_S)."""
    stored_undecided: int = 0
    """Of the acknowledged events with no decision, those the events stream still holds."""
    healed_at: float = 0.0
    current: str = "-"
    """From the heal until every NATS node answered healthy (every replica current): seconds,
    or the bound and the nodes restarted when one stayed behind past it."""
    details: list[str] = field(default_factory=list)

    HEADER = (
        f"{'fault':<34}{'sent':>6}{'acked':>7}{'resent':>7}{'decided':>8}{'lost':>6}{'doubled':>8}"
        f"{'pause s':>9}{'resume s':>9}{'ops':>7}{'unknown':>8}{'non-lin':>8}{'reverted':>9}"
        f"{'lost commits':>13}  NATS current s"
    )

    def row(self) -> str:
        return (
            f"{self.fault:<34}{self.sent:>6}{self.acked:>7}{self.resent:>7}{self.decided:>8}{self.lost:>6}"
            f"{self.doubled:>8}"
            f"{self.pause_s:>9.1f}{self.resumed_s:>9.1f}{self.ops:>7}{self.unknown:>8}"
            f"{self.sessions_not_linearizable:>8}{self.reverted:>9}{self.lost_commits:>13}  {self.current}"
        )


def measure_sessions(m: Measured, history: dict[str, list[Op]]) -> None:
    m.ops = sum(len(ops) for ops in history.values())
    m.unknown = sum(1 for ops in history.values() for op in ops if op.answer is UNKNOWN)
    # A history that is not linearizable makes the search try every order up to its budget:
    # a smaller budget keeps a run short, and an undecided session counts as not linearizable.
    verdicts = {k: check(ops, budget=SEARCH_BUDGET) for k, ops in history.items()}
    bad = {k: v for k, v in verdicts.items() if v.linearizable is not True}
    m.sessions_not_linearizable = len(bad)
    m.details += [f"{k}: {v.detail}" for k, v in bad.items()]
    m.reverted = sum(reverted_reads(ops) for ops in history.values())
    m.lost_commits = sum(lost_commits(ops) for ops in history.values())


def measure_events(
    m: Measured, load: EventLoad, decisions: Decisions, fault_at: float, healed_at: float
) -> None:
    m.sent, m.acked, m.resent = len(load.sent), len(load.acked), len(load.resent)
    m.decided = sum(1 for r in load.sent if (r, 1) in decisions.per_run)
    lost = [r for r in load.acked if (r, 1) not in decisions.per_run]
    m.lost = len(lost)
    if lost:
        m.details.append(f"acknowledged, undecided: {lost}")
    m.doubled = sum(n - 1 for n in decisions.per_run.values() if n > 1)
    m.pause_s = longest_pause(decisions.stored_at, fault_at)
    after = [t for t in decisions.stored_at if t >= healed_at]
    m.resumed_s = (after[0] - healed_at) if after else float("inf")
