"""What the console's tests share: the consoles started, runs made as runners make them (by
runners issued for their session's tenant, which own the session they commit), saved sessions
of a harness about to roll out a new generation, and what the tests configured (imported by the
fixtures of conftest.py and by the tests)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client

from shared.contract import (
    Decision,
    ErrorInfo,
    ResumeFailed,
    RunsListRequest,
    SessionRef,
    ToolCall,
    signing,
    subjects,
)
from shared.contract.client import ContinuityClient, RunnerSessions
from shared.contract.events import TURN_COMMAND, TURN_STATUS, CommandResult, HarnessInfo, TurnCompleted
from shared.contract.policy import DeclareRequest
from shared.contract.tenancy import RunnerPutRequest
from shared.contract.times import now_rfc3339
from tests.support import read_stream, wait_for
from tests.support.sessions import commit_req, new_session

DEV_TOKEN = "console-development-token"
DEV_ACTOR = "dev-alice"
ISSUER = "tests-issuer"
"""The actor that issues the tests' runners."""
RUNNER_KEY_ID = "k1"
RUNNER_KEY = b"k" * 32
"""The runners' signing key the consoles' services are configured with (conftest.py)."""
HEADER = "X-Forwarded-User"
GENERATION = "gen-never-shown-7c1e"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "console"  # tests/artifacts/console
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass
class Consoles:
    url: str
    """The console that trusts 127.0.0.1 as its proxy and has the development login."""
    untrusting_url: str
    """A console whose only trusted proxy is 192.0.2.1 (an address no test request comes from)."""


@dataclass
class Run:
    run_id: str
    runner_id: str
    session: SessionRef
    attempt: int = 1


class Runs:
    """Makes runs the way runners do: a saved session, then a `resume_failed` event."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.client = ContinuityClient(nc)

    async def _event(
        self,
        tenant: str | None = None,
        run_id: str | None = None,
        after: Run | None = None,
        session: SessionRef | None = None,
        **fields: Any,
    ) -> Run:
        """A new run's first attempt (named `run_id`, else a fresh id; on `session`, else a new
        one of `tenant`), or `after`'s next one."""
        run, attempt = (after, after.attempt + 1) if after else (await self._new(tenant, run_id, session), 1)
        run.attempt = attempt
        event = ResumeFailed(
            type="resume_failed",
            event_id=f"ev-{uuid.uuid4().hex}",
            runner_id=run.runner_id,
            run_id=run.run_id,
            attempt=attempt,
            session=run.session,
            native_session_id="ns-1",
            occurred_at=now_rfc3339(),
            **fields,
        )
        await self.js.publish(
            subjects.event(run.runner_id, "resume_failed"),
            msgspec.json.encode(event),
            headers={"Nats-Msg-Id": event.event_id},
        )
        return run

    async def runner(self, *tenants: str) -> str:
        """A new runner issued for `tenants` (`continuity.runners.put`)."""
        runner_id = f"r{uuid.uuid4().hex[:10]}"
        issued = RunnerPutRequest(runner_id=runner_id, tenants=list(tenants), actor=ISSUER)
        await self.client.runner_put(issued)
        return runner_id

    async def _new(self, tenant: str | None, run_id: str | None, session: SessionRef | None) -> Run:
        if session is None:
            session = new_session()
            if tenant is not None:
                session = msgspec.structs.replace(session, tenant=tenant)
        run = Run(run_id or f"run-{uuid.uuid4().hex[:12]}", await self.runner(session.tenant), session)
        # Committed as the runner does, on its own subject: the first commit binds the owner.
        owner = RunnerSessions(self.client, run.runner_id)
        await owner.commit(commit_req(run.session, compatibility_generation=GENERATION))
        return run

    async def reconciling(
        self, tenant: str | None = None, run_id: str | None = None, after: Run | None = None
    ) -> Run:
        """A run stopped on a pending tool call, its reconciliation open."""
        run = await self._event(
            tenant,
            run_id,
            after,
            pending_tool_call=ToolCall(
                tool_call_id="call-1", tool_name="paperclip_call_assigned_tool", started_at=now_rfc3339()
            ),
        )
        await self.wait_status(run, "reconciling")

        async def opened() -> bool:
            try:
                return (await self.client.reconciliation(run.run_id)).status == "open"
            except Exception:
                return False

        await wait_for(opened, what="the reconciliation opened")
        return run

    async def stopped(
        self, tenant: str | None = None, run_id: str | None = None, session: SessionRef | None = None
    ) -> Run:
        """A run stopped for an operator (a replay conflict)."""
        run = await self._event(
            tenant,
            run_id,
            session=session,
            error=ErrorInfo(type="runner_error", code="native_event_replay_conflict", message="x"),
        )
        await self.wait_status(run, "operator")
        return run

    async def interrupted(
        self, tenant: str | None = None, harness: HarnessInfo | None = None, after: Run | None = None
    ) -> Run:
        """A run whose transport dropped (unclassified) at its first attempt, or `after`'s next
        attempt: retried on the same session by row 4.4.9, listed `retrying` in the runs index.
        `harness`: the harness the runner names on its event."""
        error = ErrorInfo(type="transport", code="stream_closed", message="closed by peer")
        run = await self._event(tenant, after=after, error=error, harness=harness)
        await self.wait_status(run, "retrying")
        await self.indexed(run, "retrying")
        return run

    async def turn_completed(self, run: Run, harness: HarnessInfo | None = None) -> None:
        """The runner's report that the session of the run's decided attempt completed a turn
        (contract 4.6), its result signed with the runners' key."""
        unsigned = CommandResult(
            command=TURN_COMMAND,
            status=TURN_STATUS,
            issued_at=now_rfc3339(),
            key_id=RUNNER_KEY_ID,
            signature="0" * 64,
        )
        signature = signing.sign(RUNNER_KEY, run.runner_id, run.run_id, run.attempt, unsigned)
        event = TurnCompleted(
            type="turn_completed",
            event_id=f"ev-{uuid.uuid4().hex}",
            runner_id=run.runner_id,
            run_id=run.run_id,
            attempt=run.attempt,
            session=run.session,
            native_session_id="ns-1",
            occurred_at=now_rfc3339(),
            result=msgspec.structs.replace(unsigned, signature=signature),
            harness=harness,
        )
        await self.js.publish(
            subjects.event(run.runner_id, subjects.TURN_COMPLETED),
            msgspec.json.encode(event),
            headers={"Nats-Msg-Id": event.event_id},
        )

    async def refused(self, count: int) -> Run:
        """`count` events of a runner that was never issued, each refused `runner_not_registered`
        by the classifier, which tells the runner with a refusal on its decisions subject; back
        once every refusal is stored (the run's `attempt` is the last event's)."""
        run = Run(f"run-{uuid.uuid4().hex[:12]}", f"r{uuid.uuid4().hex[:10]}", new_session(), attempt=0)
        for _ in range(count):
            await self._event(after=run)
        refusals = subjects.decisions(run.runner_id)

        async def told() -> bool:
            stored = await read_stream(self.js, subjects.DECISIONS_STREAM, refusals)
            return len(stored) == count

        await wait_for(told, what=f"{count} refusals of runner {run.runner_id}")
        return run

    async def wait_status(self, run: Run, status: str) -> None:
        async def reached() -> bool:
            try:
                return (await self.client.run(run.run_id)).status == status
            except Exception:
                return False

        await wait_for(reached, what=f"run {run.run_id} {status}")

    async def indexed(self, run: Run, status: str) -> None:
        """Wait until `continuity.runs.list` lists the run with `status` (the index follows the
        decisions stream, so it may lag the run's record by a moment)."""

        async def listed() -> bool:
            page = await self.client.runs(RunsListRequest(runner_id=run.runner_id, limit=10))
            return [(r.run_id, r.status) for r in page.items] == [(run.run_id, status)]

        await wait_for(listed, what=f"run {run.run_id} {status} in the runs index")

    async def decisions(self, run: Run) -> list[Decision]:
        """What the runner reads from CONTINUITY_DECISIONS."""
        msgs = await read_stream(self.js, subjects.DECISIONS_STREAM, subjects.decisions(run.runner_id))
        return [msgspec.json.decode(m.data, type=Decision) for m in msgs]


class Rollout:
    """Saved sessions of one adapter of its own in two tenants of their own: each generation
    string unique to the test, so its absence from a page or a log line means something."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:10]
        self.adapter = f"harness-{tag}"
        self.tenants = (f"ta-{tag}", f"tb-{tag}")
        self.saved = f"gen-saved-{tag}"
        self.declared = f"gen-declared-{tag}"
        self.new = f"gen-typed-{tag}"

    def generations(self) -> tuple[str, str, str]:
        return self.saved, self.declared, self.new

    async def commit(self, runs: Runs) -> None:
        """The sessions, committed on the services' own subject (as an operator's tool would; no
        runner owns them), and the declaration.

        Tenant a: two saved under the older generation (fresh), one already under the new one
        (resumes). Tenant b: one under a generation declared to resume under the new one
        (resumes), one under the older one (fresh), one saved without a cursor (fresh, another
        reason)."""
        a, b = self.tenants
        saved: list[tuple[str, str, str | None]] = [(a, self.saved, "c-1"), (a, self.saved, "c-1")]
        saved += [(a, self.new, "c-1")]
        saved += [(b, self.declared, "c-1"), (b, self.saved, "c-1"), (b, self.saved, None)]
        for i, (tenant, generation, cursor) in enumerate(saved):
            ref = SessionRef(tenant=tenant, conversation_id=f"conv-{i}", agent_id="codex")
            await runs.client.commit(
                commit_req(ref, adapter=self.adapter, compatibility_generation=generation, cursor=cursor)
            )
        await runs.client.declare(
            DeclareRequest(
                adapter=self.adapter, saved_generation=self.declared, ready_generation=self.new, actor="ops"
            )
        )
