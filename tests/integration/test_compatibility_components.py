"""Compatibility components end to end (contract 3.2, 3.3, 3.5, 9.6 and 9.11), against the
session-store on real NATS and Redis: a commit stores the components with the generation, a
decide across a changed generation names the components that changed and nothing of their
values or digests, per-component declarations resume a change limited to declared components,
the preview counts changes by component, and clients and records without components are decided
exactly as before."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from continuity_runner import InvalidRequest, RunnerOptions, connect
from continuity_runner import SessionRef as SdkSessionRef
from continuity_runner.harness.compatibility import Components

from continuity.devstack.servers import NatsServer, RedisServer
from continuity.tools.bench.sessions import commit_request
from services import registry
from shared.contract import CommitRequest, DecideRequest, ErrorInfo, GetRequest, SessionRef, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.policy import DeclarationsRequest, DeclareRequest, PreviewRequest, RevokeRequest
from shared.platform.config import Config
from shared.records import keys
from shared.records.session import V1_FIELDS, binding_stamp, fingerprints, generation_binding
from tests.support import Bus, RunningApp, make_config, new_runner_id, resume_failed, running, wait_for
from tests.support.cli import run_cli
from tests.support.sessions import commit_req, decide_req, new_session

pytestmark = pytest.mark.asyncio

ADAPTER = "claude-code"
SAVED = Components(
    executable="claude-code@2.1",
    protocol="stream-json",
    model_route="anthropic/claude-sonnet-4",
    reasoning_effort="high",
    mcp_servers=["github", "linear"],
    permission_mode="acceptEdits",
    cwd="/work/acme",
)


def like(base: Components, **changes: Any) -> Components:
    values = {name: getattr(base, name) for name in base.names()}
    return Components.from_mapping({**values, **changes})


READY = like(SAVED, model_route="openai/gpt-5", mcp_servers=["github", "linear", "sentry"])
NEW_SERVERS = like(SAVED, mcp_servers=["github", "linear", "sentry"])


@pytest.fixture
async def store_app(config: Config) -> AsyncIterator[RunningApp]:
    async with running(registry.load("session-store"), config) as app:
        yield app


def commit_of(session: SessionRef, components: Components | None, **kw: Any) -> CommitRequest:
    extra: dict[str, Any] = {}
    if components is not None:
        extra = {
            "compatibility_generation": components.generation,
            "compatibility_components": components.digests(),
        }
    return commit_req(session, **{"adapter": ADAPTER, **extra, **kw})


def decide_of(session: SessionRef, components: Components | None, **kw: Any) -> DecideRequest:
    extra: dict[str, Any] = {}
    if components is not None:
        extra = {"ready_generation": components.generation, "ready_components": components.digests()}
    return decide_req(session, **{"adapter": ADAPTER, **extra, **kw})


def secrets(*made: Components) -> list[str]:
    """Every generation, digest and stored fingerprint of `made`, and their values' words."""
    found: list[str] = []
    for c in made:
        found += [c.generation, *c.digests().values()]
        prints = fingerprints(c.digests())  # type: ignore[arg-type]
        found += [prints[i : i + 6] for i in range(0, len(prints), 6) if prints[i : i + 6] != "......"]
    return [*found, "anthropic", "openai", "sentry", "acceptEdits", "stream-json"]


def assert_names_only(data: bytes | str, *made: Components) -> None:
    text = data.decode() if isinstance(data, bytes) else data
    leaked = [s for s in secrets(*made) if s in text]
    assert not leaked, f"{leaked} in {text}"


async def test_a_changed_model_route_and_server_set_start_fresh_and_only_their_names_are_told(
    store_app: RunningApp,
    client: ContinuityClient,
    nc: nats.aio.client.Client,
    redis_client: aioredis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    s = new_session()
    await client.commit(commit_of(s, SAVED))
    # The reply as it travels: its bytes, not only the decoded Struct.
    raw = await nc.request(subjects.SESSIONS_DECIDE, msgspec.json.encode(decide_of(s, READY)), timeout=10)
    reply = msgspec.json.decode(raw.data)
    assert (reply["mode"], reply["reason"], reply["generation"], reply["rule"]) == (
        "fresh",
        "compatibility_generation_changed",
        "changed",
        "3.3.3b",
    )
    assert reply["changed_components"] == ["mcp_servers", "model_route"]
    assert reply["resume_session_id"] is None and reply["declaration"] is None
    assert_names_only(raw.data, SAVED, READY)

    view = await client.get(GetRequest(session=s))
    assert view.components == list(SAVED.names()) and view.changed_components is None
    # The runner starts fresh and commits the new components: the record keeps what changed.
    await client.commit(commit_of(s, READY, native_session_id="ns-2"))
    view = await client.get(GetRequest(session=s))
    assert view.changed_components == ["mcp_servers", "model_route"]
    again = await client.decide(decide_of(s, READY))
    assert (again.mode, again.generation, again.changed_components) == ("resume", "matched", None)
    # A later commit of the same generation keeps the last change; another change replaces it.
    await client.commit(commit_of(s, READY, native_session_id="ns-2", cursor="c-2"))
    assert (await client.get(GetRequest(session=s))).changed_components == ["mcp_servers", "model_route"]
    moved = like(READY, cwd="/work/other")
    await client.commit(commit_of(s, moved, native_session_id="ns-3"))
    view = await client.get(GetRequest(session=s))
    assert view.changed_components == ["cwd"]
    assert_names_only(msgspec.json.encode(view), SAVED, READY, moved)

    # The stored record: compact, text, the generation packed, no component value.
    record: dict[bytes, bytes] = await redis_client.hgetall(keys.session(s.key))  # type: ignore[misc]
    assert len(record[b"components"]) == 64 and len(record[b"g"]) == 55
    assert await redis_client.object("encoding", keys.session(s.key)) == b"listpack"
    stored = b"".join(record.values()).decode()
    assert moved.generation not in stored and "openai" not in stored
    assert all(digest not in stored for digest in moved.digests().values())

    logged = " ".join(f"{r.getMessage()} {getattr(r, 'fields', {})}" for r in caplog.records)
    assert_names_only(logged, SAVED, READY, moved)


async def test_a_runner_commits_and_decides_with_its_components_through_the_sdk(
    store_app: RunningApp, nats_server: NatsServer
) -> None:
    runner = await connect(RunnerOptions(runner_id=f"cc-{uuid.uuid4().hex[:8]}", servers=nats_server.url))
    try:
        s = SdkSessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="cc")
        args = (s, "ns-1", ADAPTER, "m", "/work/acme", "same_session_only")
        # The generation is the components' when none is given; a wrong one is refused here.
        with pytest.raises(InvalidRequest) as refused:
            await runner.commit(
                *args, cursor="c-1", compatibility_generation="g-1", compatibility_components=SAVED
            )
        assert refused.value.field == "compatibility_components"
        await runner.commit(*args, cursor="c-1", compatibility_components=SAVED)
        reply = await runner.decide(
            s, ADAPTER, "m", "/work/acme", "c-1", "profile-ready", ready_components=READY
        )
        assert (reply.mode, reply.generation, reply.changed_components) == (
            "fresh",
            "changed",
            ["mcp_servers", "model_route"],
        )
        same = await runner.decide(
            s, ADAPTER, "m", "/work/acme", "c-1", "profile-ready", SAVED.generation, SAVED
        )
        assert (same.mode, same.generation) == ("resume", "matched")
        # Digests work as well as a Components.
        digests = await runner.decide(
            s, ADAPTER, "m", "/work/acme", "c-1", "profile-ready", ready_components=NEW_SERVERS.digests()
        )
        assert digests.changed_components == ["mcp_servers"]
    finally:
        await runner.close()


async def test_a_declared_component_resumes_a_change_of_it_alone(
    store_app: RunningApp, client: ContinuityClient
) -> None:
    adapter = f"cc-{uuid.uuid4().hex[:8]}"
    s = new_session()
    await client.commit(commit_of(s, SAVED, adapter=adapter))
    before = await client.decide(decide_of(s, NEW_SERVERS, adapter=adapter))
    assert (before.mode, before.generation, before.changed_components) == (
        "fresh",
        "changed",
        ["mcp_servers"],
    )

    declared = await client.declare(
        DeclareRequest(adapter=adapter, component="mcp_servers", actor="release-bot", note="new MCP set")
    )
    assert declared.component == "mcp_servers" and declared.id.startswith("compat-")
    after = await client.decide(decide_of(s, NEW_SERVERS, adapter=adapter))
    assert (after.mode, after.resume_session_id, after.rule, after.generation) == (
        "resume",
        "ns-1",
        "3.3.4",
        "declared",
    )
    assert after.changed_components == ["mcp_servers"] and after.declaration is None

    # A change of an undeclared component too is still a change; so is the same change for
    # another adapter.
    both = await client.decide(decide_of(s, READY, adapter=adapter))
    assert (both.mode, both.reason, both.changed_components) == (
        "fresh",
        "compatibility_generation_changed",
        ["mcp_servers", "model_route"],
    )
    other = new_session()
    await client.commit(commit_of(other, SAVED))
    assert (await client.decide(decide_of(other, NEW_SERVERS))).mode == "fresh"
    # Declaring model_route as well covers both.
    route = await client.declare(DeclareRequest(adapter=adapter, component="model_route", actor="alice"))
    covered = await client.decide(decide_of(s, READY, adapter=adapter))
    assert (covered.mode, covered.generation) == ("resume", "declared")

    # Listed and audited with its component; declaring again changes nothing.
    again = await client.declare(DeclareRequest(adapter=adapter, component="mcp_servers", actor="bob"))
    assert again == declared
    listed = await client.declarations(DeclarationsRequest(adapter=adapter))
    assert {(d.id, d.component) for d in listed.items} == {
        (declared.id, "mcp_servers"),
        (route.id, "model_route"),
    }
    assert [(a.kind, a.component) for a in listed.audit] == [
        ("declared", "model_route"),
        ("declared", "mcp_servers"),
    ]
    assert_names_only(msgspec.json.encode(listed), SAVED, READY, NEW_SERVERS)

    await client.revoke_declaration(RevokeRequest(id=declared.id, actor="alice"))
    revoked = await client.decide(decide_of(s, NEW_SERVERS, adapter=adapter))
    assert (revoked.mode, revoked.generation) == ("fresh", "changed")
    audit = (await client.declarations(DeclarationsRequest(adapter=adapter))).audit
    assert (audit[0].kind, audit[0].component) == ("revoked", "mcp_servers")

    # A component declaration covers nothing for a record or a request without components.
    old = new_session()
    await client.commit(commit_req(old, adapter=adapter, compatibility_generation="gen-1"))
    reply = await client.decide(decide_of(old, READY, adapter=adapter))
    assert (reply.mode, reply.generation, reply.changed_components) == ("fresh", "changed", None)


async def test_a_declaration_is_of_a_pair_or_of_a_component(
    store_app: RunningApp, client: ContinuityClient
) -> None:
    with pytest.raises(RequestError) as both:
        await client.declare(
            DeclareRequest(
                adapter="a", component="cwd", saved_generation="g1", ready_generation="g2", actor="alice"
            )
        )
    assert (both.value.status, both.value.code) == (400, "invalid_field")
    with pytest.raises(RequestError) as neither:
        await client.declare(DeclareRequest(adapter="a", saved_generation="g1", actor="alice"))
    assert (neither.value.status, neither.value.code) == (400, "missing_field")
    assert "ready_generation" in neither.value.message
    with pytest.raises(RequestError) as unknown:
        await client.call(
            subjects.COMPATIBILITY_DECLARE,
            {"adapter": "a", "component": "model", "actor": "alice"},
            DeclareRequest,
        )
    assert unknown.value.code == "invalid_field"


async def test_clients_and_records_without_components_are_decided_as_before(
    store_app: RunningApp, client: ContinuityClient, nc: nats.aio.client.Client, redis_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_req(s, compatibility_generation="gen-1"))
    # An old client's bytes: none of the new fields.
    old_request = {
        "session": msgspec.to_builtins(s),
        "adapter": "deepseek-harness",
        "model": "dsh-pro",
        "cwd": decide_req(s).cwd,
        "latest_cursor": "c-1",
        "compatibility": "profile-ready",
        "ready_generation": "gen-2",
    }
    raw = await nc.request(subjects.SESSIONS_DECIDE, msgspec.json.encode(old_request), timeout=10)
    reply = msgspec.json.decode(raw.data)
    assert (reply["mode"], reply["reason"], reply["generation"], reply["changed_components"]) == (
        "fresh",
        "compatibility_generation_changed",
        "changed",
        None,
    )
    assert (await client.decide(decide_req(s))).mode == "resume"
    view = await client.get(GetRequest(session=s))
    assert (view.components, view.changed_components) == (None, None)
    assert b"components" not in await redis_client.hgetall(keys.session(s.key))  # type: ignore[misc]

    # A record with components, decided by a client that sends none: the generation alone.
    t = new_session()
    await client.commit(commit_of(t, SAVED))
    assert (
        await client.decide(decide_of(t, None, ready_generation=SAVED.generation))
    ).generation == "matched"
    changed = await client.decide(decide_of(t, None, ready_generation="gen-2"))
    assert (changed.mode, changed.changed_components) == ("fresh", None)
    # A commit without components over one with them drops them.
    await client.commit(commit_of(t, None, compatibility_generation=SAVED.generation))
    view = await client.get(GetRequest(session=t))
    assert (view.components, view.has_generation, view.generation_trusted) == (None, True, True)
    assert (await client.decide(decide_of(t, READY))).changed_components is None


async def test_a_generation_rewritten_by_a_release_without_components_leaves_them_unread(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_of(s, SAVED))
    key = keys.session(s.key)
    record: dict[bytes, bytes] = await redis_client.hgetall(key)  # type: ignore[misc]
    # An older release's commit: a new stamp (its updated_at) and its own generation.
    await redis_client.hset(key, "updated_at", "2026-12-01T00:00:00Z")  # type: ignore[misc]
    v1 = {name: (await redis_client.hget(key, name) or b"").decode() for name in V1_FIELDS}  # type: ignore[misc]
    await redis_client.hset(key, "generation", generation_binding(v1)[:16].encode() + b"gen-old")  # type: ignore[misc]
    assert record[b"components"] == await redis_client.hget(key, "components")  # type: ignore[misc]
    view = await client.get(GetRequest(session=s))
    assert (view.generation_trusted, view.components) == (True, None)
    reply = await client.decide(decide_of(s, READY))
    assert (reply.mode, reply.generation, reply.changed_components) == ("fresh", "changed", None)
    # The next commit with components starts over: nothing known of what changed.
    await client.commit(commit_of(s, READY))
    assert (await client.get(GetRequest(session=s))).changed_components is None


async def test_components_in_the_form_of_the_previous_release_keep_what_changed(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    """A record the previous release committed: its generation in `generation` after 16 hex
    characters, the components tagged with them. It is read as it is, and the next commit of the
    same generation keeps the last change while it rewrites the record in the `g` form."""
    s = new_session()
    await client.commit(commit_of(s, SAVED))
    await client.commit(commit_of(s, READY, native_session_id="ns-2"))
    key = keys.session(s.key)
    record: dict[bytes, bytes] = await redis_client.hgetall(key)  # type: ignore[misc]
    v1 = {name: record[name.encode()].decode() for name in V1_FIELDS}
    stamp = binding_stamp(v1)
    previous = generation_binding(v1)[:16].encode()
    await redis_client.hdel(key, "g")  # type: ignore[misc]
    await redis_client.hset(  # type: ignore[misc]
        key,
        mapping={
            "generation": previous + record[b"g"][len(stamp) :],
            "components": previous[:7] + record[b"components"][7:],
        },
    )
    assert (await client.get(GetRequest(session=s))).changed_components == ["mcp_servers", "model_route"]

    await client.commit(commit_of(s, READY, native_session_id="ns-2", cursor="c-2"))
    view = await client.get(GetRequest(session=s))
    assert (view.generation_trusted, view.changed_components) == (True, ["mcp_servers", "model_route"])
    rewritten: dict[bytes, bytes] = await redis_client.hgetall(key)  # type: ignore[misc]
    assert b"generation" not in rewritten and rewritten[b"components"][:7] == rewritten[b"g"][:7]


async def test_components_that_do_not_make_the_generation_are_refused(
    store_app: RunningApp, client: ContinuityClient
) -> None:
    s = new_session()
    wrong = commit_of(s, SAVED, compatibility_generation=READY.generation)
    with pytest.raises(RequestError) as refused:
        await client.commit(wrong)
    assert (refused.value.status, refused.value.code) == (400, "invalid_field")
    assert "compatibility_components" in refused.value.message
    assert_names_only(refused.value.message, SAVED, READY)
    with pytest.raises(RequestError):
        await client.commit(commit_of(s, SAVED, compatibility_generation=None))
    with pytest.raises(RequestError) as missing:
        await client.get(GetRequest(session=s))
    assert missing.value.code == "not_found"  # nothing was written

    await client.commit(commit_of(s, SAVED))
    with pytest.raises(RequestError) as bad_decide:
        await client.decide(decide_of(s, READY, ready_generation=SAVED.generation))
    assert (bad_decide.value.code, "ready_components" in bad_decide.value.message) == ("invalid_field", True)
    with pytest.raises(RequestError) as bad_digest:
        await client.decide(decide_of(s, None, ready_generation="g", ready_components={"cwd": "X" * 64}))
    assert bad_digest.value.code == "invalid_field"


async def test_the_preview_counts_sessions_by_changed_component(
    store_app: RunningApp, client: ContinuityClient
) -> None:
    adapter = f"pv-{uuid.uuid4().hex[:8]}"
    made: list[tuple[SessionRef, str]] = []
    for n, cwd in enumerate(["/work/a", "/work/b", "/work/c"]):
        tenant = "acme" if n < 2 else "globex"
        s = SessionRef(tenant=tenant, conversation_id=f"conv-pv-{uuid.uuid4().hex[:8]}", agent_id="x")
        # Each session its own cwd: its own generation.
        await client.commit(commit_of(s, like(SAVED, cwd=cwd), adapter=adapter))
        made.append((s, cwd))
    await client.commit(commit_req(new_session(), adapter=adapter, compatibility_generation="gen-typed"))
    new_route = {"model_route": like(SAVED, model_route="openai/gpt-5").digests()["model_route"]}

    preview = await client.preview(PreviewRequest(adapter=adapter, components=new_route))  # type: ignore[arg-type]
    assert (preview.scanned, preview.resume, preview.fresh) == (4, 0, 4)
    by = {t.tenant: t for t in preview.by_tenant}
    # The session saved without components is fresh too, with no component to name.
    assert by["acme"].changed_components == {"model_route": 2}
    assert by["globex"].changed_components == {"model_route": 1}
    assert sum(t.reasons["compatibility_generation_changed"] for t in preview.by_tenant) == 4
    # The same components as stored: every session with components resumes.
    unchanged = {"model_route": SAVED.digests()["model_route"]}
    same = await client.preview(PreviewRequest(adapter=adapter, components=unchanged))  # type: ignore[arg-type]
    assert (same.resume, same.fresh) == (3, 1)
    # Declared per component: they resume, and the preview names the declaration.
    declared = await client.declare(DeclareRequest(adapter=adapter, component="model_route", actor="alice"))
    after = await client.preview(PreviewRequest(adapter=adapter, components=new_route))  # type: ignore[arg-type]
    assert (after.resume, after.fresh, after.declarations) == (3, 1, [declared.id])
    assert_names_only(msgspec.json.encode(after), SAVED)
    # Each session decided for real says the same.
    for s, cwd in made:
        ready = like(SAVED, cwd=cwd, model_route="openai/gpt-5")
        reply = await client.decide(decide_of(s, ready, adapter=adapter))
        assert (reply.mode, reply.generation, reply.changed_components) == (
            "resume",
            "declared",
            ["model_route"],
        )
    # A whole release (its generation and all its components): one session's own cwd matches,
    # the others differ in cwd too, which nothing declares.
    full = like(SAVED, cwd="/work/a", model_route="openai/gpt-5")
    whole = await client.preview(
        PreviewRequest(adapter=adapter, generation=full.generation, components=full.digests())  # type: ignore[arg-type]
    )
    assert (whole.resume, whole.fresh) == (1, 3)
    assert {t.tenant: t.changed_components for t in whole.by_tenant} == {
        "acme": {"cwd": 1, "model_route": 2},
        "globex": {"cwd": 1, "model_route": 1},
    }
    with pytest.raises(RequestError) as mismatched:
        await client.preview(
            PreviewRequest(adapter=adapter, generation=SAVED.generation, components=full.digests())  # type: ignore[arg-type]
        )
    assert mismatched.value.code == "invalid_field"
    with pytest.raises(RequestError) as nothing:
        await client.preview(PreviewRequest(adapter=adapter))
    assert nothing.value.code == "missing_field"


async def test_a_record_with_components_stays_compact(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    """The benchmark's realistic record (a 60-character cwd) with components: in Redis'
    compact encoding, 616 bytes where it is 488 without (contract 9.6)."""
    base = commit_request(777001)
    plain_key = keys.session(base.session.key)
    await client.commit(base)
    components = like(SAVED, cwd=base.cwd, composition="acme-coder-7", plugins=["review@1.4.0"])
    with_components = msgspec.structs.replace(
        commit_request(777002),
        compatibility_generation=components.generation,
        compatibility_components=components.digests(),
    )
    await client.commit(with_components)
    key = keys.session(with_components.session.key)
    plain = await redis_client.memory_usage(plain_key, samples=0) or 0
    sized = await redis_client.memory_usage(key, samples=0) or 0
    assert plain <= 512 and sized <= 640, (plain, sized)
    assert await redis_client.object("encoding", key) == b"listpack"
    assert (await client.decide(_decide_bench(with_components, components))).mode == "resume"


def _decide_bench(commit: CommitRequest, components: Components) -> DecideRequest:
    return DecideRequest(
        session=commit.session,
        adapter=commit.adapter,
        model=commit.model,
        cwd=commit.cwd,
        latest_cursor=commit.cursor,
        compatibility="profile-ready",
        ready_generation=components.generation,
        ready_components=components.digests(),  # type: ignore[arg-type]
    )


# ---- the command -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server of this module's own: its classifier's consumer clashes with no other module's."""
    server = NatsServer(tmp_path_factory.mktemp("components-nats"))
    server.start()
    yield server
    server.stop()


async def cli(url: str, *args: str) -> tuple[int, str, str]:
    return await run_cli(url, *args)


def values_file(path: Path, components: Components) -> str:
    path.write_text(json.dumps({name: getattr(components, name) for name in components.names()}))
    return str(path)


async def test_the_command_sends_digests_and_shows_names(
    cli_nats: NatsServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    config = make_config(cli_nats.url, redis_server.url)
    async with (
        running(registry.load("classifier"), config),
        running(registry.load("session-store"), config),
        running(registry.load("reconciliation"), config),
    ):
        nc = await nats.connect(cli_nats.url)
        c = ContinuityClient(nc, timeout=30)
        try:
            await _the_command(cli_nats.url, c, Bus(nc.jetstream()), tmp_path)
        finally:
            await nc.close()


async def _the_command(url: str, c: ContinuityClient, bus: Bus, tmp_path: Path) -> None:
    adapter = f"cli-{uuid.uuid4().hex[:8]}"
    saved, ready = values_file(tmp_path / "saved.json", SAVED), values_file(tmp_path / "ready.json", READY)
    where = ["--tenant", "acme", "--conversation", f"conv-{uuid.uuid4().hex[:8]}", "--agent", "cc"]
    turn = ["--adapter", adapter, "--model", "dsh-pro", "--cwd", "/work/acme"]
    code, out, err = await cli(url, "sessions", "commit", *where, *turn, "--native-session-id", "ns-1",
                               "--cursor", "c-1", "--components", saved)  # fmt: skip
    assert code == 0, err
    ask = [*where, *turn, "--latest-cursor", "c-1", "--compatibility", "profile-ready"]
    code, out, err = await cli(url, "sessions", "decide", *ask, "--components", ready, "--json")
    assert code == 0, err
    decided = json.loads(out)
    assert (decided["mode"], decided["changed_components"]) == ("fresh", ["mcp_servers", "model_route"])
    assert_names_only(out, SAVED, READY)
    # A generation that is not the components' is refused before anything is sent.
    code, out, err = await cli(url, "sessions", "decide", *where, *turn, "--compatibility", "profile-ready",
                               "--ready-generation", "g-1", "--components", ready)  # fmt: skip
    assert code == 2 and "invalid_field" in err + out

    declare = ["compatibility", "declare", "--adapter", adapter, "--actor", "alice"]
    code, out, err = await cli(
        url, *declare, "--component", "mcp_servers", "--component", "model_route", "--json"
    )
    assert code == 0, err
    assert [d["component"] for d in json.loads(out)] == ["mcp_servers", "model_route"]
    code, out, err = await cli(url, *declare, "--component", "cwd", "--saved-generation", "g-1")
    assert code == 2, out
    code, out, err = await cli(url, "compatibility", "list", "--adapter", adapter)
    assert code == 0 and "COMPONENT" in out and "mcp_servers" in out and "model_route" in out, err
    code, out, err = await cli(url, "sessions", "decide", *ask, "--components", ready)
    assert code == 0 and "declared" in out and "resume" in out, err

    route = tmp_path / "route.json"
    route.write_text(json.dumps({"model_route": "openai/gpt-5"}))
    code, out, err = await cli(url, "sessions", "preview", "--adapter", adapter, "--components", str(route))
    assert code == 0, err
    assert "CHANGED COMPONENTS" in out and "model_route: 1" in out and "1 would resume" in out
    assert_names_only(out, SAVED, READY)

    # A run of a session whose generation changed: `runs explain` names its components.
    session = SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:8]}", agent_id="cc")
    await c.commit(commit_of(session, SAVED))
    event = resume_failed(
        new_runner_id(),
        session=session,
        error=ErrorInfo(type="runner_error", code="native_event_replay_conflict", message="x"),
    )
    await bus.settled(await bus.publish(event), timeout=30)

    async def explained() -> bool:
        return any(e.explanation is not None for e in (await c.audit(event.run_id)).items)

    await wait_for(explained, timeout=30, what="the run's decision")
    await c.commit(commit_of(session, READY, native_session_id="ns-2"))
    code, out, err = await cli(url, "runs", "explain", event.run_id)
    assert code == 0, err
    assert "Saved generation made of" in out and "Changed at its last change  mcp_servers, model_route" in out
    assert_names_only(out, SAVED, READY)
    code, out, err = await cli(url, "runs", "explain", event.run_id, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["changed_components"] == ["mcp_servers", "model_route"]
    assert shown["session_components"] == list(SAVED.names())
