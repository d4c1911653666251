"""The resume decision with compatibility components (contract 3.3, 9.6 and 9.11), as pure
functions of a stored record: the packed generation and the `components` field read back, the
components that changed named in the reply (names only: no value, no digest, no fingerprint),
per-component declarations, and records and requests without components decided as before."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from continuity_runner.harness.compatibility import Components

from services.session_store import step
from shared.contract import DecideRequest, SessionRef
from shared.contract.components import COMPONENT_NAMES
from shared.contract.types import ComponentName
from shared.policy import SHIPPED
from shared.records import session as records
from shared.records.session import StoredSession, binding_stamp, fingerprints, stored_generation

V1 = {
    "native_session_id": "native-1",
    "adapter": "claude-code",
    "model": "m1",
    "cwd": "/work",
    "cursor": "c1",
    "prompt_hash": "",
    "checkpoint_policy": "same_session_only",
    "updated_at": "2026-11-30T12:00:00Z",
}

SAVED = Components(
    executable="claude-code@2.1",
    protocol="stream-json",
    model_route="anthropic/claude-sonnet-4",
    mcp_servers=["github", "linear"],
    permission_mode="acceptEdits",
    cwd="/work",
)
READY = Components(
    executable="claude-code@2.1",
    protocol="stream-json",
    model_route="openai/gpt-5",
    mcp_servers=["github", "linear", "sentry"],
    permission_mode="acceptEdits",
    cwd="/work",
)


def committed(
    components: Components | None,
    *,
    generation: str | None = None,
    mask: int = 0,
    tag: str | None = None,
) -> dict[bytes, bytes]:
    """The hash a commit of `components` leaves (what session_commit.lua writes)."""
    raw = {name.encode(): value.encode() for name, value in V1.items()}
    raw[b"revision"] = b"3"
    stamp = binding_stamp(V1)
    made = generation if generation is not None else components.generation if components else "g1"
    raw[b"g"] = stamp + stored_generation(made).encode()
    if components is not None:
        head = tag if tag is not None else stamp[: records.TAG_CHARS].decode()
        raw[b"components"] = f"{head}{mask:03x}{fingerprints(components.digests())}".encode()  # type: ignore[arg-type]
    return raw


def request(ready: Components | None = READY, **fields: Any) -> DecideRequest:
    base: dict[str, Any] = {
        "session": SessionRef(tenant="t", conversation_id="c", agent_id="a"),
        "adapter": "claude-code",
        "model": "m1",
        "cwd": "/work",
        "latest_cursor": "c1",
        "compatibility": "profile-ready",
        "ready_generation": ready.generation if ready else "g2",
        "ready_components": ready.digests() if ready else None,
    }
    return DecideRequest(**{**base, **fields})


def decide(record: StoredSession, req: DecideRequest) -> Any:
    generation = step.generation_check(record, req)
    changed = step.changed_components(record, req) if generation == "changed" else None
    return step.decide(record, req, SHIPPED, generation, None, changed)


def test_a_generation_of_components_is_stored_packed_within_a_compact_value() -> None:
    raw = committed(SAVED)
    assert len(raw[b"g"]) == 55 <= 64 and raw[b"g"][records.STAMP_CHARS : records.STAMP_CHARS + 1] == b"~"
    assert len(raw[b"components"]) == records.COMPONENTS_CHARS == 64
    record = StoredSession.from_hash(raw)
    assert record.generation == SAVED.generation and record.generation_trusted
    # A hand-typed generation is stored as it is.
    assert stored_generation("dsh-2026.11.3-p7") == "dsh-2026.11.3-p7"
    assert stored_generation("A" * 64) == "A" * 64


def test_a_packed_generation_that_does_not_decode_reads_as_it_is() -> None:
    raw = committed(None, generation="g1")
    raw[b"g"] = binding_stamp(V1) + b"~" + b"!" * 43
    assert StoredSession.from_hash(raw).generation == "~" + "!" * 43


def test_the_changed_components_are_named_and_nothing_else() -> None:
    reply = decide(StoredSession.from_hash(committed(SAVED)), request())
    assert (reply.mode, reply.reason, reply.generation) == (
        "fresh",
        "compatibility_generation_changed",
        "changed",
    )
    assert reply.changed_components == ["mcp_servers", "model_route"]
    body = msgspec.json.encode(reply).decode()
    for secret in (SAVED.generation, READY.generation, *SAVED.digests().values(), *READY.digests().values()):
        assert secret not in body and secret[:12] not in body
    for prints in (fingerprints(SAVED.digests()), fingerprints(READY.digests())):  # type: ignore[arg-type]
        for i in range(len(COMPONENT_NAMES)):
            assert prints[i * 6 : i * 6 + 6] not in body or prints[i * 6 : i * 6 + 6] == "......"
    assert "openai" not in body and "sentry" not in body


def test_a_component_one_side_lacks_is_changed() -> None:
    fewer = Components(executable="claude-code@2.1", model_route="anthropic/claude-sonnet-4")
    reply = decide(StoredSession.from_hash(committed(SAVED)), request(fewer))
    assert reply.changed_components == ["cwd", "mcp_servers", "permission_mode", "protocol"]
    empty = Components(**{**_values(SAVED), "mcp_servers": []})
    assert decide(StoredSession.from_hash(committed(SAVED)), request(empty)).changed_components == [
        "mcp_servers"
    ]


def _values(c: Components) -> dict[str, Any]:
    return {name: getattr(c, name) for name in c.names()}


def test_the_same_generation_names_nothing() -> None:
    reply = decide(StoredSession.from_hash(committed(SAVED)), request(SAVED))
    assert (reply.mode, reply.generation, reply.changed_components) == ("resume", "matched", None)


@pytest.mark.parametrize(
    ("record", "req"),
    [
        (committed(None, generation="g1"), request(READY)),  # saved without components
        (committed(SAVED), request(None)),  # a decide without components
        (committed(SAVED, tag="0000000"), request(READY)),  # components of another commit
    ],
    ids=["old-record", "old-client", "stale-components"],
)
def test_without_components_on_both_sides_nothing_is_named_and_the_answer_is_the_same(
    record: dict[bytes, bytes], req: DecideRequest
) -> None:
    stored = StoredSession.from_hash(record)
    reply = decide(stored, req)
    assert (reply.mode, reply.reason, reply.generation) == (
        "fresh",
        "compatibility_generation_changed",
        "changed",
    )
    assert reply.changed_components is None
    without = msgspec.structs.replace(req, ready_components=None)
    assert msgspec.structs.replace(decide(stored, without), changed_components=None) == reply


def test_a_declared_change_names_its_components_and_resumes() -> None:
    record = StoredSession.from_hash(committed(SAVED))
    req = request()
    reply = step.decide(record, req, SHIPPED, "declared", None, step.changed_components(record, req))
    assert (reply.mode, reply.rule, reply.generation) == ("resume", "3.3.4", "declared")
    assert reply.changed_components == ["mcp_servers", "model_route"] and reply.declaration is None


def test_compatibility_none_compares_nothing() -> None:
    record = StoredSession.from_hash(committed(SAVED))
    reply = decide(record, request(compatibility="none"))
    assert (reply.mode, reply.generation, reply.changed_components) == ("resume", "not_compared", None)


def test_a_change_no_fingerprint_tells_is_not_named() -> None:
    """Different generations whose components' fingerprints are all equal (36 bits each: a
    chance, or components of another generation): no name, so no declaration can cover it."""
    record = StoredSession.from_hash(committed(SAVED, generation="0" * 64))
    req = request(SAVED)
    assert step.generation_check(record, req) == "changed"
    assert step.changed_components(record, req) is None


def test_the_view_names_the_stored_components_and_the_last_change() -> None:
    mask = sum(1 << COMPONENT_NAMES.index(n) for n in ("mcp_servers", "model_route"))
    view = step.view(StoredSession.from_hash(committed(READY, mask=mask)))
    assert view.components == [
        "cwd",
        "executable",
        "mcp_servers",
        "model_route",
        "permission_mode",
        "protocol",
    ]
    assert view.changed_components == ["mcp_servers", "model_route"]
    unknown = step.view(StoredSession.from_hash(committed(READY)))
    assert unknown.components is not None and unknown.changed_components is None
    old = step.view(StoredSession.from_hash(committed(None)))
    assert (old.components, old.changed_components) == (None, None)
    body = msgspec.json.encode(view).decode()
    assert READY.generation not in body and fingerprints(READY.digests()) not in body  # type: ignore[arg-type]


def test_the_fingerprints_are_36_bits_of_each_digest_in_name_order() -> None:
    digests: dict[ComponentName, str] = {"cwd": "f" * 64, "protocol": "0" * 64}
    prints = fingerprints(digests)
    assert len(prints) == 54
    assert prints[6:12] == "______" and prints[42:48] == "AAAAAA"
    assert prints.count(records.ABSENT) == 7
    assert records.changed_by_prints(prints, fingerprints({"cwd": "f" * 64})) == ["protocol"]


def test_the_archiver_hides_a_packed_generation_as_the_runner_prints_it() -> None:
    """The archiver reads the stored generation to hide it in a runner's output (9.6): a packed
    one is read back as the hex digits a runner prints."""
    from services.archiver.scrub import scrub

    values = records.every_generation(committed(SAVED))
    assert values == {SAVED.generation}
    assert SAVED.generation not in scrub(f"moved; generation {SAVED.generation.upper()} kept", values)
