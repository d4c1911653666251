"""session-store against real NATS and Redis: every rule of contract section 3."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest
import redis.asyncio as aioredis

from services import registry
from shared.contract import GetRequest, RejectRequest, SessionRef
from shared.contract.client import ContinuityClient, RequestError
from shared.platform.config import Config
from shared.records import keys
from tests.support import RunningApp, running
from tests.support.sessions import CWD, commit_req, decide_req, new_session

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def store_app(config: Config) -> AsyncIterator[RunningApp]:
    async with running(registry.load("session-store"), config) as app:
        yield app


async def write_legacy(r: aioredis.Redis, session: SessionRef, **fields: str) -> None:
    """What an older release does: HSET version-1 fields directly, no generation."""
    base = {
        "native_session_id": "ns-legacy",
        "adapter": "deepseek-harness",
        "model": "dsh-pro",
        "cwd": CWD,
        "cursor": "c-1",
        "prompt_hash": "ph",
        "checkpoint_policy": "same_session_only",
        "updated_at": "2026-11-30T12:00:00.000Z",
    }
    base.update(fields)
    await r.hset(keys.session(session.key), mapping=base)  # type: ignore[arg-type]


async def test_no_record_is_fresh_no_session(store_app: RunningApp, client: ContinuityClient) -> None:
    reply = await client.decide(decide_req(new_session()))
    assert (reply.mode, reply.transcript, reply.reason, reply.resume_session_id) == (
        "fresh",
        "full",
        "no_session",
        None,
    )
    assert reply.revision is None and reply.epoch is None


async def test_matching_generation_resumes_incrementally(
    store_app: RunningApp, client: ContinuityClient
) -> None:
    s = new_session()
    committed = await client.commit(commit_req(s))
    assert (committed.revision, committed.epoch) == (1, 0)
    reply = await client.decide(decide_req(s))
    assert (reply.mode, reply.transcript, reply.reason, reply.resume_session_id) == (
        "resume",
        "incremental",
        None,
        "ns-1",
    )
    assert reply.revision == 1


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("held", "session_held"),
        ("archived", "session_archived"),
        ("rejected", "resume_target_rejected"),
    ],
)
async def test_state_rules(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis, state: str, reason: str
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    await redis_client.hset(keys.session(s.key), "state", state)  # type: ignore[misc]
    reply = await client.decide(decide_req(s))
    assert (reply.mode, reply.transcript, reply.reason, reply.resume_session_id) == (
        "fresh",
        "full",
        reason,
        None,
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"model": "dsh-lite"}, "model_changed"),
        ({"cwd": "/elsewhere"}, "cwd_changed"),
        ({"latest_cursor": "c-2"}, "conversation_advanced"),
        ({"latest_cursor": None}, "conversation_advanced"),
    ],
)
async def test_guards(
    store_app: RunningApp, client: ContinuityClient, change: dict[str, object], reason: str
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    reply = await client.decide(decide_req(s, **change))
    assert (reply.mode, reply.reason, reply.resume_session_id, reply.transcript) == (
        "fresh",
        reason,
        None,
        "full",
    )


async def test_missing_cursor(store_app: RunningApp, client: ContinuityClient) -> None:
    s = new_session()
    await client.commit(commit_req(s, cursor=None))
    reply = await client.decide(decide_req(s, latest_cursor=None))
    assert reply.reason == "missing_cursor"


async def test_guard_order_follows_the_contract(store_app: RunningApp, client: ContinuityClient) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    reply = await client.decide(
        decide_req(s, model="other", cwd="/other", latest_cursor="c-9", ready_generation="gen-9")
    )
    assert reply.reason == "model_changed"
    reply = await client.decide(decide_req(s, cwd="/other", latest_cursor="c-9", ready_generation="gen-9"))
    assert reply.reason == "cwd_changed"


async def test_existing_guard_wins_over_matching_generation(
    store_app: RunningApp, client: ContinuityClient
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    reply = await client.decide(decide_req(s, latest_cursor="c-2", ready_generation="gen-1"))
    assert reply.reason == "conversation_advanced"


async def test_legacy_record_reseeds_exactly_once(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    s = new_session()
    await write_legacy(redis_client, s)
    first = await client.decide(decide_req(s))
    assert (first.mode, first.reason, first.transcript) == (
        "fresh",
        "compatibility_generation_missing",
        "full",
    )
    # The runner reseeds a fresh session with the full transcript, then commits it.
    await client.commit(commit_req(s, native_session_id="ns-2"))
    second = await client.decide(decide_req(s))
    assert (second.mode, second.resume_session_id, second.transcript) == ("resume", "ns-2", "incremental")


async def test_ready_generation_null_is_missing(store_app: RunningApp, client: ContinuityClient) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    reply = await client.decide(decide_req(s, ready_generation=None))
    assert reply.reason == "compatibility_generation_missing"


async def test_upgrade_then_rollback_each_reseed(store_app: RunningApp, client: ContinuityClient) -> None:
    s = new_session()
    await client.commit(commit_req(s, compatibility_generation="gen-1"))
    upgrade = await client.decide(decide_req(s, ready_generation="gen-2"))
    assert (upgrade.mode, upgrade.reason) == ("fresh", "compatibility_generation_changed")
    await client.commit(commit_req(s, native_session_id="ns-2", compatibility_generation="gen-2"))
    assert (await client.decide(decide_req(s, ready_generation="gen-2"))).mode == "resume"
    rollback = await client.decide(decide_req(s, ready_generation="gen-1"))
    assert (rollback.mode, rollback.reason) == ("fresh", "compatibility_generation_changed")
    await client.commit(commit_req(s, native_session_id="ns-3", compatibility_generation="gen-1"))
    back = await client.decide(decide_req(s, ready_generation="gen-1"))
    assert (back.mode, back.resume_session_id) == ("resume", "ns-3")


async def test_ready_generation_is_authoritative(store_app: RunningApp, client: ContinuityClient) -> None:
    """The profile was replaced between detection and spawn: a probe saw gen-1, the spawned
    provider's ready frame says gen-2. Only the ready value is an input, so a session stamped
    with gen-1 is not resumed under gen-2, and one stamped gen-2 is."""
    s = new_session()
    await client.commit(commit_req(s, compatibility_generation="gen-1"))
    assert (await client.decide(decide_req(s, ready_generation="gen-2"))).reason == (
        "compatibility_generation_changed"
    )
    await client.commit(commit_req(s, native_session_id="ns-2", compatibility_generation="gen-2"))
    assert (await client.decide(decide_req(s, ready_generation="gen-2"))).resume_session_id == "ns-2"


async def test_validated_cancellation_is_persisted_and_resumes(
    store_app: RunningApp, client: ContinuityClient
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    cancelled = await client.commit(commit_req(s, native_session_id="ns-2", cursor="c-2", cancelled=True))
    assert cancelled.revision == 2
    reply = await client.decide(decide_req(s, latest_cursor="c-2"))
    assert (reply.mode, reply.resume_session_id, reply.transcript) == ("resume", "ns-2", "incremental")


@pytest.mark.parametrize("code", ["resume_target_missing", "resume_target_corrupt"])
async def test_rejected_target_reseeds_once(
    store_app: RunningApp, client: ContinuityClient, code: str
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    cleared = await client.reject(RejectRequest(session=s, native_session_id="ns-1", code=code))  # type: ignore[arg-type]
    assert cleared.cleared is True
    first = await client.decide(decide_req(s))
    assert (first.mode, first.reason, first.transcript) == ("fresh", "resume_target_rejected", "full")
    # Contract 3.4: every decision until the next commit answers the reseed (a turn that fails
    # before committing reseeds again), not only the first.
    again = await client.decide(decide_req(s))
    assert (again.mode, again.reason, again.transcript) == ("fresh", "resume_target_rejected", "full")
    await client.commit(commit_req(s, native_session_id="ns-2"))
    assert (await client.get(GetRequest(session=s))).state == "active"
    assert (await client.decide(decide_req(s))).resume_session_id == "ns-2"


async def test_stale_rejection_changes_nothing(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_req(s, native_session_id="ns-2"))
    before = await redis_client.hgetall(keys.session(s.key))  # type: ignore[misc]
    reply = await client.reject(
        RejectRequest(session=s, native_session_id="ns-1", code="resume_target_missing")
    )
    assert reply.cleared is False
    assert await redis_client.hgetall(keys.session(s.key)) == before  # type: ignore[misc]
    assert (await client.decide(decide_req(s))).resume_session_id == "ns-2"


@pytest.mark.parametrize(
    "field",
    [
        "native_session_id",
        "adapter",
        "model",
        "cwd",
        "cursor",
        "prompt_hash",
        "checkpoint_policy",
        "updated_at",
    ],
)
async def test_direct_v1_write_leaves_generation_untrusted(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis, field: str
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    assert (await client.get(GetRequest(session=s))).generation_trusted is True
    current = await redis_client.hget(keys.session(s.key), field)  # type: ignore[misc]
    # An older release rewrites one field; for most fields the same value plus a suffix.
    new_value = "2026-12-01T00:00:00.000Z" if field == "updated_at" else current.decode() + "x"
    await redis_client.hset(keys.session(s.key), field, new_value)  # type: ignore[misc]
    view = await client.get(GetRequest(session=s))
    assert (view.has_generation, view.generation_trusted) == (True, False)
    if field in ("model", "cwd", "cursor"):
        return  # rule 2 answers first for these; the generation rule is shown by the others
    reply = await client.decide(decide_req(s))
    assert (reply.mode, reply.reason) == ("fresh", "compatibility_generation_missing")


async def test_updated_at_only_rewrite_is_untrusted(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    await redis_client.hset(keys.session(s.key), "updated_at", "2026-11-30T23:59:59.999Z")  # type: ignore[misc]
    assert (await client.decide(decide_req(s))).reason == "compatibility_generation_missing"


async def test_adapters_that_did_not_opt_in_behave_as_before(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    s = new_session()
    await write_legacy(redis_client, s)
    reply = await client.decide(decide_req(s, compatibility="none", ready_generation=None))
    assert (reply.mode, reply.resume_session_id) == ("resume", "ns-legacy")
    await client.commit(commit_req(s, compatibility_generation=None))
    reply = await client.decide(decide_req(s, compatibility="none", ready_generation="anything"))
    assert reply.mode == "resume"
    reply = await client.decide(decide_req(s, compatibility="none", latest_cursor="c-7"))
    assert reply.reason == "conversation_advanced"


async def test_null_generation_clears_the_stored_one(store_app: RunningApp, client: ContinuityClient) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    await client.commit(commit_req(s, compatibility_generation=None))
    view = await client.get(GetRequest(session=s))
    assert (view.has_generation, view.generation_trusted) == (False, False)
    assert (await client.decide(decide_req(s))).reason == "compatibility_generation_missing"


async def test_revision_conflict_and_stale_epoch_write_nothing(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    await redis_client.hset(keys.session(s.key), "epoch", 3)  # type: ignore[misc]
    before = await redis_client.hgetall(keys.session(s.key))  # type: ignore[misc]
    with pytest.raises(RequestError) as err:
        await client.commit(commit_req(s, native_session_id="ns-9", expected_revision=7))
    assert (err.value.status, err.value.code) == (409, "revision_conflict")
    with pytest.raises(RequestError) as err:
        await client.commit(commit_req(s, native_session_id="ns-9", epoch=2))
    assert (err.value.status, err.value.code) == (409, "stale_epoch")
    assert await redis_client.hgetall(keys.session(s.key)) == before  # type: ignore[misc]
    ok = await client.commit(commit_req(s, native_session_id="ns-9", expected_revision=1, epoch=3))
    assert (ok.revision, ok.epoch) == (2, 3)


async def test_forty_concurrent_cas_commits_have_one_winner(
    store_app: RunningApp, client: ContinuityClient
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    results = await asyncio.gather(
        *(client.commit(commit_req(s, native_session_id=f"ns-{i}", expected_revision=1)) for i in range(40)),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, RequestError) and r.code == "revision_conflict"]
    assert len(winners) == 1 and len(losers) == 39
    assert (await client.get(GetRequest(session=s))).revision == 2


async def test_held_session_is_not_reactivated_and_is_kept_on_a_new_handle(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    await redis_client.hset(keys.session(s.key), "state", "held")  # type: ignore[misc]
    held = await redis_client.hgetall(keys.session(s.key))  # type: ignore[misc]
    with pytest.raises(RequestError) as err:
        await client.commit(commit_req(s))
    assert (err.value.status, err.value.code) == (409, "session_held")
    assert await redis_client.hgetall(keys.session(s.key)) == held  # type: ignore[misc]
    await client.commit(commit_req(s, native_session_id="ns-new"))
    assert await redis_client.hgetall(keys.held_archive(s.key, "ns-1")) == held  # type: ignore[misc]
    view = await client.get(GetRequest(session=s))
    assert (view.state, view.native_session_id) == ("active", "ns-new")


async def test_get_shows_no_generation_value(
    store_app: RunningApp, client: ContinuityClient, nc: object
) -> None:
    s = new_session()
    await client.commit(commit_req(s, compatibility_generation="gen-secret-value"))
    msg = await client.nc.request(
        "continuity.sessions.get", msgspec.json.encode(GetRequest(session=s)), timeout=5
    )
    assert b"gen-secret-value" not in msg.data
    view = await client.get(GetRequest(session=s))
    assert (view.has_generation, view.generation_trusted, view.state) == (True, True, "active")
    with pytest.raises(RequestError) as err:
        await client.get(GetRequest(session=new_session()))
    assert (err.value.status, err.value.code) == (404, "not_found")


BAD_GENERATIONS = ["", "g" * 129, "gen\nline", "gen-1\n"]


@pytest.mark.parametrize("generation", BAD_GENERATIONS)
@pytest.mark.parametrize("endpoint", ["commit", "decide"])
async def test_bad_generation_is_rejected_without_echo(
    store_app: RunningApp, client: ContinuityClient, generation: str, endpoint: str
) -> None:
    s = new_session()
    if endpoint == "commit":
        payload = msgspec.to_builtins(commit_req(s))
        payload["compatibility_generation"] = generation
    else:
        payload = msgspec.to_builtins(decide_req(s))
        payload["ready_generation"] = generation
    msg = await client.nc.request(f"continuity.sessions.{endpoint}", msgspec.json.encode(payload), timeout=5)
    assert msg.headers is not None and msg.headers["Nats-Service-Error-Code"] == "400"
    body = msgspec.json.decode(msg.data)
    assert body["error"]["code"] == "invalid_field"
    if generation:
        assert generation.strip() not in msg.data.decode()
        assert generation.strip() not in msg.headers["Nats-Service-Error"]


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"\xff\xfe garbage", "malformed_json"),
        (b"[1, 2, 3]", "invalid_field"),
        (b"{}", "missing_field"),
        (
            b'{"session": {"tenant": "t", "conversation_id": "c"}, "adapter": "a", "model": "m", "cwd": "/"}',
            "missing_field",
        ),
        (
            b'{"session": {"tenant": "bad tenant!", "conversation_id": "c", "agent_id": "a"},'
            b' "adapter": "a", "model": "m", "cwd": "/"}',
            "invalid_field",
        ),
        (
            b'{"session": {"tenant": "t", "conversation_id": "c", "agent_id": "a"}, "adapter": "a",'
            b' "model": "m", "cwd": "/", "compatibility": "sometimes-secret"}',
            "invalid_field",
        ),
    ],
)
async def test_bad_requests_get_a_400_with_a_code(
    store_app: RunningApp, client: ContinuityClient, payload: bytes, code: str
) -> None:
    msg = await client.nc.request("continuity.sessions.decide", payload, timeout=5)
    assert msg.headers is not None and msg.headers["Nats-Service-Error-Code"] == "400"
    body = msgspec.json.decode(msg.data)
    assert body["error"]["code"] == code
    assert "sometimes-secret" not in msg.data.decode() and "bad tenant" not in msg.data.decode()


async def test_service_answers_srv_ping(store_app: RunningApp, client: ContinuityClient) -> None:
    msg = await client.nc.request("$SRV.PING.continuity-session-store", b"", timeout=5)
    info = msgspec.json.decode(msg.data)
    assert info["name"] == "continuity-session-store" and info["type"] == "io.nats.micro.v1.ping_response"
