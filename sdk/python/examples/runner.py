"""A runner's two journeys with Continuity, end to end, with a stand-in provider.

1. At ready: spawn the provider, read the `ready` frame, ask `decide`, resume (incremental turn)
   or start fresh (full transcript), and `commit` after the turn; a resume target that turns out
   missing is `reject`ed and the turn starts fresh.
2. After a failure: the resume of the saved session fails, the runner reports `resume_failed`,
   answers the archiver's remote move, and follows the decision it gets (or, when the report is
   refused for the runner's quota, sends it again at `not_before`).

Run it against running services (`continuity up`, started with the same
CONTINUITY_RUNNER_KEYS, which the command results of a real runner are signed with):

    NATS_URL=nats://127.0.0.1:4222 CONTINUITY_RUNNER_KEYS=k1=<base64> python sdk/python/examples/runner.py

Exit code 0 when both journeys ended as the contract says, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from continuity_runner import (
    ArchiveRequest,
    ArchiveResult,
    Decision,
    ErrorInfo,
    Runner,
    RunnerOptions,
    SessionRef,
    connect,
)
from continuity_runner.types import CheckpointPolicy

ADAPTER, MODEL = "codex", "gpt-5-codex"
POLICY: CheckpointPolicy = "allow_replacement_after_resume_failure"


@dataclass
class Provider:
    """Stands in for a spawned provider process: its `ready` frame and the sessions it knows."""

    generation: str = "dsh-2026.11.3-p7"
    sessions: set[str] = field(default_factory=set)

    def ready(self) -> str:
        """The `compatibility_generation` of the `ready` frame: authoritative for `decide`."""
        return self.generation

    def resume(self, handle: str) -> bool:
        return handle in self.sessions

    def fresh(self) -> str:
        handle = f"ns-{uuid.uuid4().hex[:12]}"
        self.sessions.add(handle)
        return handle


@dataclass
class Workspace:
    session: SessionRef
    cwd: str
    cursor: str | None = None
    epoch: int | None = None


def say(text: str) -> None:
    print(text, flush=True)


async def turn(runner: Runner, ws: Workspace, provider: Provider) -> str:
    """One turn, the journey at ready. Returns the native session the turn ran in."""
    generation = provider.ready()
    reply = await runner.decide(
        ws.session,
        ADAPTER,
        MODEL,
        ws.cwd,
        latest_cursor=ws.cursor,
        compatibility="profile-ready",
        ready_generation=generation,
    )
    handle = reply.resume_session_id
    if reply.mode == "resume" and handle is not None and provider.resume(handle):
        say(f"decide: resume {handle}, incremental turn")
    else:
        if reply.mode == "resume" and handle is not None:
            # The stored handle is gone on the provider's side: say so, then start fresh.
            await runner.reject(ws.session, handle, "resume_target_missing")
            say(f"decide: resume {handle}, but the provider lost it: rejected")
        else:
            say(f"decide: fresh ({reply.reason}), full transcript")
        handle = provider.fresh()
    ws.cursor = f"turn-{uuid.uuid4().hex[:8]}"  # the turn ran; the conversation advanced
    saved = await runner.commit(
        ws.session,
        handle,
        ADAPTER,
        MODEL,
        ws.cwd,
        POLICY,
        cursor=ws.cursor,
        compatibility_generation=generation,
        epoch=ws.epoch,
    )
    ws.epoch = saved.epoch
    say(f"commit: {handle} saved at revision {saved.revision}, epoch {saved.epoch}")
    return handle


async def archive_saved_state(request: ArchiveRequest) -> ArchiveResult:
    """The remote move: put the saved state of `request.native_session_id` aside (a real runner
    moves its files); exit code 0 only when it did."""
    say(f"archive: moved the saved state of {request.native_session_id} aside ({request.archive_id})")
    return ArchiveResult(exit_code=0, output="moved")


async def wait_until(not_before: str | None) -> None:
    if not_before:
        at = datetime.fromisoformat(not_before.replace("Z", "+00:00"))
        await asyncio.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))


async def follow(runner: Runner, d: Decision, ws: Workspace, provider: Provider) -> bool:
    """What a runner does for each action (docs/integrate-a-runner.md). True: work goes on."""
    say(f"decision: {d.action} ({d.reason})")
    if d.action == "retry_same_session":
        await wait_until(d.not_before)
        await turn(runner, ws, provider)  # the same session again, as attempt d.attempt + 1
        return True
    if d.action in ("open_replacement", "continue_fresh"):
        # A fresh provider session in the same workspace, full transcript; the record's new
        # epoch fences off any runner from before.
        ws.epoch = d.epoch
        provider.sessions.clear()
        await turn(runner, ws, provider)
        return True
    # operator, reconcile: stop here; a `continue_fresh` may follow once a person decided.
    say("stopped: the saved session is held for an operator")
    return False


async def main() -> int:
    keys = {
        key_id: base64.b64decode(value)
        for key_id, value in (
            item.split("=", 1) for item in os.environ.get("CONTINUITY_RUNNER_KEYS", "").split(",") if item
        )
    }
    options = RunnerOptions(
        runner_id=os.environ.get("RUNNER_ID", "example-runner"),
        servers=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"),
        signing_keys=keys,
    )
    runner = await connect(options)
    try:
        await runner.serve_archive(archive_saved_state)
        conversation = f"conv-{uuid.uuid4().hex[:12]}"
        session = SessionRef(tenant="example", conversation_id=conversation, agent_id="codex")
        ws = Workspace(session, cwd=f"/workspaces/example/{conversation}")
        provider = Provider()

        say("-- at ready")
        await turn(runner, ws, provider)  # nothing saved yet: fresh
        await turn(runner, ws, provider)  # resumes what the first turn saved
        provider.sessions.clear()  # the provider lost its sessions (a wiped cache)
        await turn(runner, ws, provider)  # resume target missing: rejected, then fresh

        say("-- after a failure")
        handle = next(iter(provider.sessions))
        run_id = f"run-{uuid.uuid4().hex}"
        drop = ErrorInfo(type="transport", code="stream_closed", message="websocket closed by peer")
        event_id = await runner.report_resume_failure(run_id, 1, session, handle, error=drop)
        say(f"reported resume_failed {event_id}")
        async for delivery in runner.decisions():
            refused, decision = delivery.refusal, delivery.decision
            if refused is not None and refused.run_id == run_id:
                # Refused before any decision (contract 10.5): a spent quota is sent again at
                # not_before; any other code is final.
                await delivery.ack()
                if refused.code != "quota_exceeded":
                    say(f"refused: {refused.code}")
                    return 1
                say(f"reported again {await runner.report_again(refused)}")
                continue
            if decision is None or decision.run_id != run_id:
                await delivery.ack()  # an earlier run's decision, or refusal
                continue
            await follow(runner, decision, ws, provider)
            await delivery.ack()
            break
        return 0
    finally:
        await runner.drain()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
