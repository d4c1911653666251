"""JetStream bounds under deploy/nats/auth.conf: every stream has a size, and a runner's share of
the events and decisions streams is bounded at the server, before any quota of the services.

The reported fault: the streams had no max_bytes and no per-subject limit, and a runner's
events land in CONTINUITY_EVENTS before the classifier's quotas apply, so one runner could fill
JetStream for everyone. Replayed against a nats-server running the shipped authorization, with
the four services creating the streams from their configuration (small limits, so that a flood
of a few hundred events reaches them), and two runners issued by `continuity runners add`."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import msgspec
import nats
import pytest
from nats.js.api import StreamConfig
from nats.js.errors import BadRequestError

from continuity.cli.runner_accounts import RUNNER_MAX_PAYLOAD
from continuity.cli.runner_files import ACCOUNTS_FILE, IMPORTS_FILE
from services import registry
from shared.contract import Decision, SessionRef, subjects
from shared.platform.bus.streams import StreamLimits, stream_configs
from shared.platform.config import MIB, Config
from tests.deploy.conftest import (
    DEPLOY,
    PASSWORDS,
    Stack,
    inbox,
    start_server,
)
from tests.support import resume_failed, wait_for
from tests.support.bus import Conn, Opener

PER_RUNNER = 20
FLOOD = 200
LIMITS = {
    "stream_messages_per_runner": PER_RUNNER,
    "events_max_bytes": 8 * MIB,
    "decisions_max_bytes": 8 * MIB,
    "work_max_bytes": 2 * MIB,
    "dead_max_bytes": 4 * MIB,
}
SERVICE_SETTINGS = LIMITS


async def as_runner(open_: Opener, stack: Stack, runner: str) -> Conn:
    return await open_(stack.url(), inbox_prefix=inbox(runner), nkeys_seed=stack.seeds[runner])


def event(runner: str) -> bytes:
    session = SessionRef(tenant="t1", conversation_id=f"c-{uuid.uuid4().hex[:12]}", agent_id="agent")
    return msgspec.json.encode(resume_failed(runner, session=session))


async def held(operator: Conn, stream: str, subject: str) -> int:
    """The messages `stream` holds on `subject`."""
    info = await operator.nc.jetstream().stream_info(stream, subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0)


def test_every_stream_is_bounded_by_default() -> None:
    config = Config.from_env({})
    every = [*stream_configs(1, 120, StreamLimits.of(config)), *registry.own_streams(config)]
    configs = {c.name: c for c in every}
    assert subjects.HISTORY_STREAM in configs  # the reconciliation service's own
    assert all(c.max_bytes and c.max_bytes > 0 for c in configs.values())
    for name in (subjects.EVENTS_STREAM, subjects.DECISIONS_STREAM):
        assert configs[name].max_msgs_per_subject == Config().stream_messages_per_runner
    # Together within the store of the shipped single server (deploy/nats/nats-server.conf) and
    # of the dev overlay's.
    total = sum(c.max_bytes or 0 for c in configs.values())
    store = (DEPLOY / "nats" / "nats-server.conf").read_text()
    assert "max_file_store: 8G" in store
    assert total + 16 * MIB <= 8 * 1024 * MIB
    overlay = (DEPLOY / "kubernetes" / "overlays" / "dev" / "nats" / "nats.conf").read_text()
    assert "max_file_store: 4G" in overlay
    assert total + 16 * MIB <= 4 * 1024 * MIB


async def test_a_flooding_runner_keeps_its_share_and_the_others_still_publish(
    services: None, stack: Stack, open_: Opener
) -> None:
    operator = await open_(stack.url("operator"), inbox_prefix=inbox("operator"))
    flooder, other = await as_runner(open_, stack, "runner-a"), await as_runner(open_, stack, "runner-b")
    own = subjects.event("runner-b", "resume_failed")
    before = await other.nc.jetstream().publish(own, event("runner-b"))

    flood = subjects.event("runner-a", "resume_failed")
    fjs = flooder.nc.jetstream()
    for _ in range(FLOOD):  # bounded: every one acknowledged, the oldest of its own dropped
        await fjs.publish(flood, event("runner-a"))
    assert await held(operator, subjects.EVENTS_STREAM, flood) == PER_RUNNER
    # Other event types would be subjects of their own, beyond the per-subject limit: refused.
    for kind in ("resume_failed2", "x"):
        await flooder.nc.publish(subjects.event("runner-a", kind), event("runner-a"))
    assert len(await flooder.violations()) == 2

    # The other runner's event published before the flood is still there, and it still publishes.
    assert await held(operator, subjects.EVENTS_STREAM, own) == 1
    after = await other.nc.jetstream().publish(own, event("runner-b"))
    assert after.seq > before.seq and await held(operator, subjects.EVENTS_STREAM, own) == 2

    # Its decisions come through; the flooder's decisions and refusals keep within its share too.
    sub = await other.nc.jetstream().pull_subscribe_bind("runner-b", subjects.DECISIONS_STREAM)
    decided: set[str] = set()

    async def both_decided() -> bool:
        for msg in await sub.fetch(2, timeout=5):
            await msg.ack()
            decided.add(msgspec.json.decode(msg.data, type=Decision).run_id)
        return len(decided) == 2

    await wait_for(both_decided, timeout=30, what="runner-b's two decisions")
    decisions_of_a = subjects.decisions("runner-a")
    assert await held(operator, subjects.DECISIONS_STREAM, decisions_of_a) <= PER_RUNNER
    events_info = await operator.nc.jetstream().stream_info(subjects.EVENTS_STREAM)
    assert events_info.config.max_bytes == LIMITS["events_max_bytes"]
    assert events_info.state.bytes <= LIMITS["events_max_bytes"]


async def test_a_runner_message_over_its_accounts_limit_is_refused(services: None, stack: Stack) -> None:
    """Its share in bytes: each of its messages at most its account's `max_payload`."""

    async def quiet(_: Exception) -> None:
        return None

    nc = await nats.connect(
        stack.url(),
        nkeys_seed=str(stack.seeds["runner-b"]),
        inbox_prefix=inbox("runner-b"),
        error_cb=quiet,
        allow_reconnect=False,
    )
    own = subjects.event("runner-b", "resume_failed")
    try:
        # Not JSON: dead-lettered by the classifier, after the stream took it.
        ack = await nc.jetstream().publish(own, b"x" * (RUNNER_MAX_PAYLOAD - 512))
        assert ack.stream == subjects.EVENTS_STREAM
        await nc.publish(own, b"x" * (RUNNER_MAX_PAYLOAD + 1))
        await wait_for(lambda: nc.is_closed, timeout=10, what="the server to close the connection")
    finally:
        await nc.close()
    assert (
        f"maximum payload exceeded: {RUNNER_MAX_PAYLOAD + 1} vs {RUNNER_MAX_PAYLOAD}" in stack.log.read_text()
    )


async def test_the_server_refuses_a_stream_without_a_size(tmp_path: Path) -> None:
    for name in ("auth.conf", ACCOUNTS_FILE, IMPORTS_FILE):
        shutil.copy(DEPLOY / "nats" / name, tmp_path / name)
    proc, port = start_server(tmp_path, tmp_path / "server.log")
    try:
        nc = await nats.connect(
            f"nats://classifier:{PASSWORDS['classifier']}@127.0.0.1:{port}", inbox_prefix=inbox("classifier")
        )
        try:
            js = nc.jetstream()
            unbounded = StreamConfig(name=subjects.WORK_STREAM, subjects=[subjects.WORK_ARCHIVE])
            with pytest.raises(BadRequestError, match="max bytes"):
                await js.add_stream(unbounded)
            (work,) = [c for c in stream_configs(1, 120) if c.name == subjects.WORK_STREAM]
            assert (await js.add_stream(work)).config.max_bytes == work.max_bytes
        finally:
            await nc.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
