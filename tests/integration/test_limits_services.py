"""The contract's limits against running services on real NATS and Redis (section 9.8): input
over a limit is dead-lettered once as invalid (never retried into `dead.exhausted`) or answered
400 (never 500), and the reconciliation list pages so that no reply exceeds the payload limit."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from services.reconciliation.step import member
from services.reconciliation.store import ReconciliationStore
from shared.contract import ListRequest, ReconcileWork, SessionRef, ToolCall, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.limits import MAX_EVENT_BYTES, MAX_PAGE_BYTES, NAME_CHARS
from shared.contract.times import now_rfc3339
from shared.platform.bus.publish import DEAD_REASON_HEADER
from shared.platform.redis import Redis
from shared.records import keys
from tests.support import make_config, running, wait_for
from tests.support.records import url_of

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServer, RedisServer]]:
    """Servers of this module's own: its list counts every reconciliation record there is."""
    n = NatsServer(tmp_path_factory.mktemp("limits-nats"))
    r = RedisServer(tmp_path_factory.mktemp("limits-redis"))
    n.start()
    r.start()
    yield n, r
    n.stop()
    r.stop()


@pytest.fixture(scope="module")
async def stack(servers: tuple[NatsServer, RedisServer]) -> AsyncIterator[Client]:
    n, r = servers
    config = make_config(n.url, r.url)
    async with (
        running(registry.load("classifier"), config),
        running(registry.load("archiver"), config),
        running(registry.load("reconciliation"), config),
        running(registry.load("session-store"), config),
    ):
        nc = await nats.connect(n.url)
        yield nc
        await nc.close()


@pytest.fixture
async def redis(servers: tuple[NatsServer, RedisServer]) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(servers[1].url)
    yield client
    await client.aclose()


def event(run_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": "resume_failed",
        "event_id": f"ev-{run_id}",
        "runner_id": "r-limits",
        "run_id": run_id,
        "attempt": 1,
        "session": {"tenant": "acme", "conversation_id": f"c-{run_id}", "agent_id": "codex"},
        "native_session_id": "ns-1",
        "occurred_at": now_rfc3339(),
        **fields,
    }


async def read(js: JetStreamContext, stream: str, subject: str) -> list[Msg]:
    """Every message stored on `subject`, through a fresh consumer."""
    sub = await js.pull_subscribe(subject, stream=stream)
    try:
        pending = (await sub.consumer_info()).num_pending or 0
        msgs: list[Msg] = []
        while len(msgs) < pending:
            msgs.extend(await sub.fetch(pending - len(msgs), timeout=5))
        return msgs
    finally:
        await sub.unsubscribe()


async def dead_reasons(js: JetStreamContext, subject: str, needle: bytes) -> list[str | None]:
    msgs = await read(js, subjects.DEAD_STREAM, subject)
    return [(m.headers or {}).get(DEAD_REASON_HEADER) for m in msgs if needle in m.data]


async def settled(js: JetStreamContext, stream: str, durable: str, seq: int) -> None:
    async def done() -> bool:
        info = await js.consumer_info(stream, durable)
        return info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= seq

    await wait_for(done, timeout=20, what=f"{durable} acknowledged seq {seq}")


CASES = {
    # name: (the event's bytes, its closed reason)
    "a 900 KB event": (lambda run: msgspec.json.encode(event(run, pad="x" * 900_000)), "payload_too_large"),
    "a 1 MB tool name": (
        lambda run: msgspec.json.encode(
            event(
                run,
                pending_tool_call={
                    "tool_call_id": "c1",
                    "tool_name": "t" * 900_000,
                    "started_at": now_rfc3339(),
                },
            )
        ),
        "payload_too_large",
    ),
    "a tool name one over its limit": (
        lambda run: msgspec.json.encode(
            event(
                run,
                pending_tool_call={
                    "tool_call_id": "c1",
                    "tool_name": "t" * (NAME_CHARS + 1),
                    "started_at": now_rfc3339(),
                },
            )
        ),
        "invalid_field",
    ),
    "deep nesting in an unknown field": (
        lambda run: msgspec.json.encode(event(run))[:-1] + b',"x":' + b"[" * 30_000 + b"]" * 30_000 + b"}",
        "malformed_json",
    ),
    "invalid UTF-8 in an unknown field": (
        lambda run: msgspec.json.encode(event(run))[:-1] + b',"x":"\xff\xfe"}',
        "malformed_json",
    ),
    "an attempt of 2^70": (lambda run: msgspec.json.encode(event(run, attempt=2**70)), "invalid_field"),
    "an impossible date": (
        lambda run: msgspec.json.encode(event(run, occurred_at="2026-13-01T00:00:00Z")),
        "invalid_field",
    ),
    "hour 24": (
        lambda run: msgspec.json.encode(event(run, occurred_at="2026-11-30T24:00:01Z")),
        "invalid_field",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_an_event_over_a_limit_is_dead_lettered_once_as_invalid(stack: Client, case: str) -> None:
    build, reason = CASES[case]
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    data = build(run_id)
    js = stack.jetstream()
    ack = await js.publish(subjects.event("r-limits", "resume_failed"), data)
    await settled(js, subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER, ack.seq)
    needle = run_id.encode()
    assert await dead_reasons(js, subjects.DEAD_INVALID, needle) == [reason]
    assert await dead_reasons(js, subjects.DEAD_EXHAUSTED, needle) == []

    # The classifier goes on deciding.
    valid = f"run-{uuid.uuid4().hex[:12]}"
    await js.publish(subjects.event("r-limits", "resume_failed"), msgspec.json.encode(event(valid)))

    async def decided() -> bool:
        msgs = await read(js, subjects.DECISIONS_STREAM, subjects.decisions("r-limits"))
        return any(valid.encode() in m.data for m in msgs)

    await wait_for(decided, timeout=20, what="a decision after the rejected event")


@pytest.mark.parametrize(
    ("subject", "durable"),
    [
        (subjects.WORK_ARCHIVE, subjects.ARCHIVER_CONSUMER),
        (subjects.WORK_RECONCILE, subjects.RECONCILIATION_CONSUMER),
    ],
)
async def test_a_work_item_over_the_limit_is_dead_lettered_as_too_large(
    stack: Client, subject: str, durable: str
) -> None:
    marker = f"work-{uuid.uuid4().hex[:12]}"
    data = b'{"marker":"' + marker.encode() + b'","pad":"' + b"x" * MAX_EVENT_BYTES + b'"}'
    js = stack.jetstream()
    ack = await js.publish(subject, data)
    await settled(js, subjects.WORK_STREAM, durable, ack.seq)
    assert await dead_reasons(js, subjects.DEAD_INVALID, marker.encode()) == ["payload_too_large"]


async def raw_request(nc: Client, subject: str, data: bytes) -> tuple[str | None, dict[str, Any]]:
    reply = await nc.request(subject, data, timeout=10)
    return (reply.headers or {}).get("Nats-Service-Error-Code"), msgspec.json.decode(reply.data)


async def test_bad_requests_get_400_not_500(stack: Client) -> None:
    deep = b'{"status":"open","x":' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    commit = {
        "session": {"tenant": "acme", "conversation_id": "c-1", "agent_id": "codex"},
        "native_session_id": "ns-1",
        "adapter": "codex",
        "model": "m",
        "cwd": "/w",
        "checkpoint_policy": "same_session_only",
    }
    cases = [
        (subjects.RECONCILIATIONS_LIST, deep, "malformed_json"),
        (
            subjects.SESSIONS_COMMIT,
            msgspec.json.encode(commit)[:-1] + b',"x":' + b"{" * 40 + b"}" * 40 + b"}",
            "malformed_json",
        ),
        (subjects.SESSIONS_COMMIT, msgspec.json.encode(commit | {"pad": "x" * 70_000}), "payload_too_large"),
        (subjects.SESSIONS_COMMIT, msgspec.json.encode(commit | {"epoch": 2**53}), "invalid_field"),
        (subjects.SESSIONS_COMMIT, msgspec.json.encode(commit | {"cwd": "/" * 4097}), "invalid_field"),
        (subjects.RECONCILIATIONS_LIST, b'{"cursor":"not-a-cursor"}', "invalid_field"),
    ]
    for subject, data, code in cases:
        status, body = await raw_request(stack, subject, data)
        assert (status, body["error"]["code"]) == ("400", code), (subject, code)


async def open_record(store: ReconciliationStore, tool_name: str) -> str:
    """A record as the reconciliation service opens it; built in Python, so a tool name over
    today's limit stands for a record opened before the limit existed."""
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    now = now_rfc3339()
    await store.open(
        ReconcileWork(
            runner_id="r-limits",
            run_id=run_id,
            attempt=1,
            session=SessionRef(tenant="acme", conversation_id=f"c-{run_id}", agent_id="codex"),
            native_session_id="ns-1",
            tool_call=ToolCall(tool_call_id="call-1", tool_name=tool_name, started_at=now),
            decision_id=f"{run_id}:1:reconcile",
            opened_at=now,
        )
    )
    return run_id


@pytest.fixture(scope="module")
async def listed(stack: Client, servers: tuple[NatsServer, RedisServer]) -> AsyncIterator[list[str]]:
    """Three records from before the tool name's limit (400 KB names), and enough records at
    the limit, in escaped text, to make more than one page by bytes; their run ids."""
    redis = Redis(servers[1].url)
    store = ReconciliationStore(redis)
    opened = [await open_record(store, "L" * 400_000) for _ in range(3)]
    heavy = "\x01" * NAME_CHARS  # six bytes each in JSON
    for _ in range(20):  # in batches: a client's pool has a bounded number of connections
        opened += await asyncio.gather(*(open_record(store, heavy) for _ in range(20)))
    yield opened
    await redis.aclose()


async def test_the_list_pages_by_cursor_and_no_page_exceeds_the_limit(
    stack: Client, redis: aioredis.Redis, listed: list[str]
) -> None:
    store = ReconciliationStore(Redis(url_of(redis)))
    pages: list[int] = []
    seen: list[str] = []
    opened_at: list[str] = []
    cursor: str | None = None
    while True:
        data = msgspec.json.encode(ListRequest(status="open", limit=1000, cursor=cursor))
        reply = await stack.request(subjects.RECONCILIATIONS_LIST, data, timeout=10)
        assert not (reply.headers or {}).get("Nats-Service-Error-Code"), reply.data[:200]
        assert len(reply.data) <= MAX_PAGE_BYTES
        body = msgspec.json.decode(reply.data)
        pages.append(len(body["items"]))
        seen += [item["run_id"] for item in body["items"]]
        opened_at += [item["opened_at"] for item in body["items"]]
        for item in body["items"]:
            assert len(item["tool_call"]["tool_name"]) <= NAME_CHARS
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert len(pages) >= 2 and all(n > 0 for n in pages)
    assert set(listed) <= set(seen) and len(seen) == len(set(seen))
    assert opened_at == sorted(opened_at)  # oldest first, across pages

    # Records opened between two pages come after the cursor; none is skipped or repeated.
    first = msgspec.json.decode(
        (await stack.request(subjects.RECONCILIATIONS_LIST, b'{"status":"open","limit":2}', timeout=10)).data
    )
    later = await open_record(store, "shell")
    # The record the cursor names leaves the open index (delivered) before the next page.
    named = first["items"][1]
    session = SessionRef(**named["session"])
    await redis.zrem(
        keys.reconciliations_open(keys.reconciliation_bucket(named["run_id"])),
        member(session.key, named["run_id"]),
    )
    client = ContinuityClient(stack)
    rest = await client.reconciliations_upto(
        ListRequest(status="open", limit=1000, cursor=first["next_cursor"])
    )
    assert [r.run_id for r in rest.items] == [*seen[2:], later]
    assert rest.next_cursor is None

    # A limit caps the records; the client follows pages up to it.
    some = await client.reconciliations_upto(ListRequest(status="open", limit=250))
    still_open = [run_id for run_id in seen if run_id != named["run_id"]]
    assert [r.run_id for r in some.items] == still_open[:250] and some.next_cursor is not None
    with pytest.raises(RequestError) as err:
        await client.reconciliations(ListRequest(cursor="x" * 10))
    assert err.value.status == 400


CLI = str(Path(sys.executable).parent / "continuity")


async def cli(nats_url: str, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        CLI, "reconciliations", "list", "--nats-url", nats_url, *args, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_the_cli_fetches_every_page_or_follows_a_cursor(
    stack: Client, servers: tuple[NatsServer, RedisServer], listed: list[str]
) -> None:
    url = servers[0].url
    everything = await ContinuityClient(stack).reconciliations_upto(ListRequest(status="open", limit=1000))
    ids = [r.run_id for r in everything.items]
    assert len(msgspec.json.encode(everything)) > MAX_PAGE_BYTES  # more than one page

    code, out = await cli(url, "--limit", "1000", "--json")
    assert code == 0
    assert [item["run_id"] for item in json.loads(out)["items"]] == ids

    code, out = await cli(url, "--limit", "3")
    assert code == 0 and all(run_id in out for run_id in ids[:3]) and ids[3] not in out
    more = out.rstrip().splitlines()[-1]
    assert more.startswith("More after these: --cursor ")

    code, out = await cli(url, "--limit", "2", "--cursor", more.rsplit(" ", 1)[-1], "--json")
    assert code == 0
    page = json.loads(out)
    assert [item["run_id"] for item in page["items"]] == ids[3:5] and page["next_cursor"]
