"""The operator's NATS user under deploy/nats/auth.conf: no consumer API but info, and the
commands that used one still work.

Replayed against a nats-server running the shipped authorization, with the four services and
two runners issued by `continuity runners add`: the operator can create no consumer (the
reported push consumer whose deliver subject put decisions into CONTINUITY_WORK, under the
filtered create subject it once held, a pull consumer on the dead letters, a durable) and
delete none; `continuity watch` and `continuity dead list|show|replay` read by sequence as
the operator; `continuity runners add --create-consumer` and `runners remove` have the
session-store make and delete the runner's consumer, whose own right stops at runners'
consumers; and the server logs no violation of the operator's or the session-store's but the
test's deliberate attempts."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import msgspec
import pytest
from nats.js.api import AckPolicy, DeliverPolicy
from nats.js.errors import NotFoundError

from shared.contract import Decision, ResumeFailed, SessionRef, subjects
from shared.contract.times import now_rfc3339
from tests.deploy.conftest import Stack, acontinuity, inbox
from tests.security.conftest import as_user
from tests.support import wait_for
from tests.support.bus import Conn, Opener

STREAMS = (subjects.EVENTS_STREAM, subjects.DECISIONS_STREAM, subjects.WORK_STREAM, subjects.DEAD_STREAM)


async def as_runner(open_: Opener, stack: Stack, runner: str) -> Conn:
    return await open_(stack.url(), inbox_prefix=inbox(runner), nkeys_seed=stack.seeds[runner])


async def operator_cli(stack: Stack, *args: str) -> tuple[int, str, str]:
    done = await acontinuity(*args, "--nats-url", stack.url("operator"))
    return done.returncode, done.stdout, done.stderr


def resume_failed(runner: str, run_id: str) -> bytes:
    event = ResumeFailed(
        type="resume_failed",
        event_id=f"{run_id}.1",
        runner_id=runner,
        run_id=run_id,
        attempt=1,
        session=SessionRef(tenant="t1", conversation_id=f"c-{run_id}", agent_id="agent"),
        native_session_id="native-1",
        occurred_at=now_rfc3339(),
    )
    return msgspec.json.encode(event)


async def consumers(conn: Conn) -> dict[str, set[str]]:
    """Every stream's consumers, by name."""
    found = {}
    for stream in STREAMS:
        reply = await conn.nc.request(f"$JS.API.CONSUMER.NAMES.{stream}", b"{}", timeout=5)
        found[stream] = set(json.loads(reply.data)["consumers"] or [])
    return found


def consumer_request(stream: str, **config: object) -> bytes:
    return json.dumps({"stream_name": stream, "config": config}).encode()


async def test_the_operator_can_neither_create_nor_delete_a_consumer(
    services: None, stack: Stack, open_: Opener
) -> None:
    operator = await as_user(open_, stack, "operator")
    ojs = operator.nc.jetstream()
    work_before = (await ojs.stream_info(subjects.WORK_STREAM)).state.last_seq
    before = await consumers(operator)
    assert {"runner-a", "runner-b", subjects.RUNS_INDEX_CONSUMER} <= before[subjects.DECISIONS_STREAM]

    decisions, dead = subjects.DECISIONS_STREAM, subjects.DEAD_STREAM
    # runner-a's decisions pushed into CONTINUITY_WORK, which keeps them until acknowledged
    push_into_work = consumer_request(
        decisions,
        name="spy",
        deliver_subject=subjects.WORK_ARCHIVE,
        deliver_policy="all",
        ack_policy="none",
        filter_subject=subjects.decisions("runner-a"),
    )
    read_dead = consumer_request(dead, name="reader", ack_policy="none", headers_only=True)
    attempts = [
        # a push consumer, under the filtered create subject the operator held for runners'
        # consumers, and under every other create subject
        (f"$JS.API.CONSUMER.CREATE.{decisions}.spy.{subjects.decisions('runner-a')}", push_into_work),
        (f"$JS.API.CONSUMER.CREATE.{decisions}.spy", push_into_work),
        (f"$JS.API.CONSUMER.CREATE.{decisions}", push_into_work),
        (f"$JS.API.CONSUMER.DURABLE.CREATE.{decisions}.spy", push_into_work),
        # a pull consumer of the dead letters (`continuity dead list` made one), ephemeral and
        # named, and of the events; a durable
        (f"$JS.API.CONSUMER.CREATE.{dead}.reader.{subjects.DEAD_ALL}", read_dead),
        (f"$JS.API.CONSUMER.CREATE.{dead}.reader", read_dead),
        (f"$JS.API.CONSUMER.CREATE.{dead}", read_dead),
        (f"$JS.API.CONSUMER.CREATE.{subjects.EVENTS_STREAM}", consumer_request(subjects.EVENTS_STREAM)),
        (f"$JS.API.CONSUMER.DURABLE.CREATE.{dead}.reader", read_dead),
        # deletions: a runner's consumer, the runs index, a service's
        (f"$JS.API.CONSUMER.DELETE.{decisions}.runner-a", b""),
        (f"$JS.API.CONSUMER.DELETE.{decisions}.{subjects.RUNS_INDEX_CONSUMER}", b""),
        (f"$JS.API.CONSUMER.DELETE.{subjects.EVENTS_STREAM}.{subjects.CLASSIFIER_CONSUMER}", b""),
        # an ordered consumer's flow control, a fetch
        (f"$JS.FC.{decisions}.x.1.1", b""),
        (f"$JS.API.CONSUMER.MSG.NEXT.{dead}.reader", b'{"batch": 1}'),
    ]
    for subject, body in attempts:
        await operator.nc.publish(subject, body, reply=operator.nc.new_inbox())
    assert len(await operator.violations()) == len(attempts)

    # A decision published after the attempts reaches its runner's consumer, and nothing else.
    runner = await as_runner(open_, stack, "runner-a")
    await runner.nc.jetstream().publish(
        subjects.event("runner-a", "resume_failed"), resume_failed("runner-a", "run-op-1")
    )

    async def decided() -> bool:
        info = await ojs.consumer_info(decisions, "runner-a")
        return (info.num_pending or 0) >= 1

    await wait_for(decided, timeout=20, what="runner-a's decision in its consumer")
    assert await consumers(operator) == before
    assert (await ojs.stream_info(subjects.WORK_STREAM)).state.last_seq == work_before


async def test_watch_and_dead_letters_read_by_sequence_as_the_operator(
    services: None, stack: Stack, open_: Opener
) -> None:
    operator = await as_user(open_, stack, "operator")
    before = await consumers(operator)
    refused_before = stack.violations_of(("operator",))
    runner = await as_runner(open_, stack, "runner-b")
    rjs = runner.nc.jetstream()

    # `watch` from now: the next decision of runner-b, as a JSON line.
    run_id = f"run-watch-{time.time_ns()}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "continuity", "watch", "--runner", "runner-b", "--count", "1", "--json",
        "--nats-url", stack.url("operator"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        started = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert started.startswith(b"Watching CONTINUITY_DECISIONS"), started
        await rjs.publish(subjects.event("runner-b", "resume_failed"), resume_failed("runner-b", run_id))
        shown = msgspec.json.decode(await asyncio.wait_for(proc.stdout.readline(), 30), type=Decision)
        assert (shown.runner_id, shown.run_id) == ("runner-b", run_id)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    # `watch --since`: the same decision, read back, as a table.
    code, out, err = await operator_cli(
        stack, "watch", "--since", "1h", "--runner", "runner-b", "--count", "1"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("DECIDED AT") and run_id in lines[1]

    # A dead letter of runner-b's: listed, shown, replayed (published: within the original's
    # duplicate window JetStream drops it, and the command says so).
    await rjs.publish(
        subjects.event("runner-b", "resume_failed"), b"not json", headers={"Nats-Msg-Id": f"{run_id}-bad"}
    )
    filters = ("--original-subject", subjects.event("runner-b", ""), "--reason", "malformed_json", "--json")
    found: list[dict[str, object]] = []

    async def listed() -> bool:
        code, out, err = await operator_cli(stack, "dead", "list", *filters)
        assert code == 0, err
        found[:] = json.loads(out)["items"]
        return bool(found)

    await wait_for(listed, timeout=30, what="runner-b's dead letter listed")
    seq = str(found[-1]["seq"])
    code, out, err = await operator_cli(stack, "dead", "show", seq, "--json")
    assert code == 0, err
    assert json.loads(out)["body_text"] == "not json"
    code, _, err = await operator_cli(stack, "dead", "replay", seq)
    assert code == 1 and "[duplicate_dropped]" in err, err

    assert await consumers(operator) == before  # none made for any of it
    assert stack.violations_of(("operator",)) == refused_before


async def test_runners_consumers_are_made_and_deleted_by_the_session_store(
    services: None, stack: Stack, open_: Opener, tmp_path: Path
) -> None:
    operator = await as_user(open_, stack, "operator")
    ojs = operator.nc.jetstream()
    refused_before = stack.violations_of(("operator", "session-store"))

    # A runner issued now: its consumer is the stream's, whether or not its account is loaded yet.
    runner = "runner-c"
    code, out, err = await operator_cli(
        stack, "runners", "add", runner, "--tenant", "t1", "--seed-file", str(tmp_path / "c.nk"),
        "--create-consumer",
    )  # fmt: skip
    assert code == 0, err
    assert f"# the session-store created consumer {runner} on {subjects.DECISIONS_STREAM}" in err
    made = (await ojs.consumer_info(subjects.DECISIONS_STREAM, runner)).config
    assert (made.durable_name, made.filter_subject, made.deliver_subject) == (
        runner,
        subjects.decisions(runner),
        None,
    )
    assert (made.ack_policy, made.deliver_policy) == (AckPolicy.EXPLICIT, DeliverPolicy.ALL)

    code, out, err = await operator_cli(stack, "runners", "remove", runner, "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["consumer"] == "deleted"
    with pytest.raises(NotFoundError):
        await ojs.consumer_info(subjects.DECISIONS_STREAM, runner)
    assert stack.violations_of(("operator", "session-store")) == refused_before

    # The session-store's own right: consumers under the create subject filtered to one token
    # below continuity.decisions (a wildcard as that token passes the permission too: the
    # server matches a published subject's `*` and `>` as tokens), never the runs index's.
    store = await as_user(open_, stack, "session-store")
    decisions = subjects.DECISIONS_STREAM
    pull = consumer_request(decisions, name="x", ack_policy="explicit", filter_subject=subjects.DECISIONS_ALL)
    index = subjects.RUNS_INDEX_CONSUMER
    attempts = [
        (f"$JS.API.CONSUMER.CREATE.{decisions}.{index}.{subjects.decisions('runner-a')}", pull),
        (f"$JS.API.CONSUMER.DELETE.{decisions}.{index}", b""),
        (f"$JS.API.CONSUMER.CREATE.{decisions}.x", pull),
        (f"$JS.API.CONSUMER.CREATE.{decisions}", pull),
        (f"$JS.API.CONSUMER.DURABLE.CREATE.{decisions}.x", pull),
        (f"$JS.API.CONSUMER.CREATE.{subjects.DEAD_STREAM}", consumer_request(subjects.DEAD_STREAM)),
        (f"$JS.API.CONSUMER.DELETE.{subjects.EVENTS_STREAM}.{subjects.CLASSIFIER_CONSUMER}", b""),
    ]
    for subject, body in attempts:
        await store.nc.publish(subject, body, reply=store.nc.new_inbox())
    assert len(await store.violations()) == len(attempts)
    kept = (await ojs.consumer_info(decisions, index)).config
    assert (kept.durable_name, kept.filter_subject) == (index, subjects.DECISIONS_ALL)
