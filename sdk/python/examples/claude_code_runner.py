"""A runner around the real Claude Code CLI (`claude -p`), one turn per run.

1. `decide`: resume the saved session (`claude -p PROMPT --resume ID --output-format json`, the
   incremental turn) or start a fresh one (`claude -p TRANSCRIPT --session-id NEW ...`, the full
   transcript).
2. A resume that failed goes to `runner.recover` with what claude left (exit code, stdout,
   stderr): the Claude Code adapter classifies it with the shipped harness table. When the
   session's file is not on this host (the presence probe), the saved handle is rejected; else
   the failure is reported with a command result signed with its class, and the runner follows
   Continuity's decision (`native_session_missing` is `continue_fresh`).
3. `decide` again after a rejection or a fresh decision: `fresh` (`resume_target_rejected`), so
   the turn runs in a fresh session with the full transcript.
4. After a turn claude completed, `commit` its session id; when the turn followed a decision of
   Continuity, tell it the decision worked (`turn_completed`, contract 4.6): `runner.recover`
   sends it for a resume (`decided_attempt`), `report_turn_completed` for a fresh session.

    NATS_URL=nats://127.0.0.1:4222 CONTINUITY_RUNNER_KEYS=k1=<base64> \\
      python sdk/python/examples/claude_code_runner.py --tenant acme --conversation conv-1 "Go on"

`--remote-sessions` says claude keeps its sessions where this process cannot look (another
container): the probe is not asked and every failure is reported for Continuity to decide.
Exit code 0 when the turn ran and was committed; 1 when Continuity says to stop (operator,
reconcile, a refusal); 2 when claude itself failed in a fresh session (not logged in, no
network).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from continuity_runner import Decision, HarnessInfo, Runner, RunnerOptions, SessionRef, connect, harness
from continuity_runner.harness import NotAFailure, Outcome, Rejected

ADAPTER = "claude-code"
"""The adapter name given to decide and commit, and the harness of the table."""


@dataclass
class Turn:
    """The turn to run and where: the conversation's slot, the workspace, and the prompts."""

    session: SessionRef
    cwd: str
    model: str
    prompt: str
    transcript: str
    cursor: str
    claude: str
    remote_sessions: bool


def say(text: str) -> None:
    print(text, flush=True)


async def run_claude(turn: Turn, *args: str) -> Outcome:
    """Run claude in the workspace; what it left, as the adapter reads it."""
    proc = await asyncio.create_subprocess_exec(
        turn.claude,
        *args,
        cwd=turn.cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return Outcome(
        exit_code=proc.returncode, stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace")
    )


def what_claude_said(outcome: Outcome) -> str:
    """The `result` of claude's JSON reply, else the first line it wrote to stderr."""
    try:
        reply = json.loads(outcome.stdout)
    except ValueError:
        reply = None
    if isinstance(reply, dict) and isinstance(reply.get("result"), str):
        return str(reply["result"])
    lines = outcome.stderr.strip().splitlines()
    return lines[0] if lines else f"exit code {outcome.exit_code}"


async def wait_until(not_before: str | None) -> None:
    if not_before:
        at = datetime.fromisoformat(not_before.replace("Z", "+00:00"))
        await asyncio.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))


async def decision_for(runner: Runner, run_id: str) -> Decision | None:
    """The decision of `run_id` (None when its report was refused for good); a report refused
    for the runner's quota is sent again at `not_before`."""
    async for delivery in runner.decisions():
        refusal, decision = delivery.refusal, delivery.decision
        await delivery.ack()
        if refusal is not None and refusal.run_id == run_id:
            if refusal.code != "quota_exceeded":
                say(f"refused: {refusal.code}")
                return None
            say(f"reported again {await runner.report_again(refusal)}")
        elif decision is not None and decision.run_id == run_id:
            return decision
    return None


async def one_turn(runner: Runner, turn: Turn) -> int:
    adapter = harness.adapter(ADAPTER)
    run_id, attempt = f"run-{uuid.uuid4().hex}", 1
    epoch: int | None = None  # the epoch a decision set, to commit with
    go_fresh = False  # a decision said: continue in a fresh session
    decided: int | None = None  # the attempt of the last decision: a completed turn is its outcome
    reported: str | None = None  # the turn_completed sent for it
    while True:
        reply = await runner.decide(turn.session, ADAPTER, turn.model, turn.cwd, latest_cursor=turn.cursor)
        handle = reply.resume_session_id
        if reply.mode == "resume" and handle is not None and not go_fresh:
            say(f"decide: resume {handle}, incremental turn")
            outcome = await run_claude(turn, "-p", turn.prompt, "--resume", handle, "--output-format", "json")
            verdict = await runner.recover(
                adapter,
                outcome,
                run_id=run_id,
                attempt=attempt,
                session=turn.session,
                native_session_id=handle,
                # The probe looks for the session's file under CLAUDE_CONFIG_DIR (or ~/.claude);
                # it cannot see another container's, so a remote runner reports instead.
                cwd=turn.cwd,
                env=os.environ,
                probe_first=not turn.remote_sessions,
                decided_attempt=decided,  # after a retry: its success is the decision's outcome
            )
            if isinstance(verdict, NotAFailure):
                session_id, reported = handle, verdict.reported_event_id
            elif isinstance(verdict, Rejected):
                say(f"recover: {verdict.failure_class} ({verdict.rule}); not on this host: rejected")
                continue  # decide again: fresh, resume_target_rejected
            else:
                say(f"recover: {verdict.failure_class} ({verdict.rule}); reported {verdict.event_id}")
                decision = await decision_for(runner, run_id)
                if decision is None:
                    return 1
                say(f"decision: {decision.action} ({decision.reason}, rule {decision.rule})")
                decided = decision.attempt
                if decision.action == "retry_same_session":
                    await wait_until(decision.not_before)
                    attempt += 1
                    continue
                if decision.action not in ("continue_fresh", "open_replacement"):
                    say("stopped: the saved session is held for an operator")
                    return 1
                epoch, go_fresh = decision.epoch, True
                continue  # decide again, then a fresh session with the full transcript
        else:
            say(f"decide: fresh ({reply.reason}), full transcript")
            session_id = str(uuid.uuid4())
            outcome = await run_claude(
                turn, "-p", turn.transcript, "--session-id", session_id, "--output-format", "json"
            )
            say(f"claude: fresh session {session_id}, exit code {outcome.exit_code}")
            assessed = adapter.assess(outcome)
            if assessed.failure_class is not None:
                say(f"claude: the fresh turn failed ({assessed.rule}): {what_claude_said(outcome)}")
                return 2
        saved = await runner.commit(
            turn.session,
            session_id,
            ADAPTER,
            turn.model,
            turn.cwd,
            "same_session_only",
            cursor=turn.cursor,
            expected_revision=reply.revision,
            epoch=epoch if epoch is not None else reply.epoch,
        )
        say(f"commit: {session_id} at revision {saved.revision}, epoch {saved.epoch}")
        if decided is not None and reported is None:  # the fresh session after a decision
            reported = await runner.report_turn_completed(
                run_id, decided, turn.session, session_id, harness=HarnessInfo(name=ADAPTER)
            )
        if reported is not None:
            say(f"outcome: turn completed after the decision of attempt {decided} ({reported})")
        return 0


def signing_keys(value: str) -> dict[str, bytes]:
    """`CONTINUITY_RUNNER_KEYS` (`id=base64,...`): the keys the command results are signed with."""
    pairs = (item.split("=", 1) for item in value.split(",") if item)
    return {key_id: base64.b64decode(key) for key_id, key in pairs}


def parse(argv: list[str] | None = None) -> Turn:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("prompt", help="the incremental turn")
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--agent", default="claude")
    parser.add_argument("--transcript", help="the full transcript for a fresh session (default: the prompt)")
    parser.add_argument("--cursor", default="turn-1", help="the conversation's latest cursor")
    parser.add_argument("--model", default="claude-sonnet-4-5")
    parser.add_argument("--cwd", default=os.getcwd(), help="the workspace claude runs in")
    parser.add_argument("--claude", default=shutil.which("claude") or "claude", help="the claude binary")
    parser.add_argument("--remote-sessions", action="store_true", help="report every failure; probe nothing")
    args = parser.parse_args(argv)
    return Turn(
        session=SessionRef(tenant=args.tenant, conversation_id=args.conversation, agent_id=args.agent),
        cwd=os.path.abspath(args.cwd),
        model=args.model,
        prompt=args.prompt,
        transcript=args.transcript or args.prompt,
        cursor=args.cursor,
        claude=args.claude,
        remote_sessions=args.remote_sessions,
    )


async def main(turn: Turn) -> int:
    options = RunnerOptions(
        runner_id=os.environ.get("RUNNER_ID", "claude-code-runner"),
        servers=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"),
        signing_keys=signing_keys(os.environ.get("CONTINUITY_RUNNER_KEYS", "")),
    )
    runner = await connect(options)
    try:
        return await one_turn(runner, turn)
    finally:
        await runner.drain()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
