"""Property-based fuzzing of the wire, against the four running services (contract sections 1, 2
and 7): bad payloads on every event, work and request subject, interleaved with valid traffic.

- every bad event or work item is dead-lettered exactly once on `continuity.dead.invalid` with a
  closed reason (never exhausted, never quarantined, never decided);
- every bad request gets a 400 with a closed code, and a message that repeats nothing it was sent;
- the valid traffic around it is decided exactly once (one decision per run, one opened
  reconciliation, one revision per commit, the answer of each valid request).

The messages are built from the contract's text (field kinds below), not from the code's
Structs. Bad payloads: garbage bytes, truncated JSON, a top-level non-object, wrong types,
missing required fields, over-long and out-of-pattern tokens, values outside closed sets or
ranges, invalid UTF-8 in a known field, plus extra unknown fields. Five more kinds are
contract violations that the decoding does not reject yet (deep nesting, invalid UTF-8 in an
unknown field, impossible calendar times, integers beyond 2^53, over-long free text): they run
in their own tests, expected to fail only while `shared.contract.decoding` shows that gap (probed below).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
import nats
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import Decision, ResumeFailed, RunRequest, subjects
from shared.contract.decoding import InvalidInput, decode
from tests.support import make_config, running, wait_for

pytestmark = pytest.mark.asyncio

INVALID_REASONS = {
    "payload_too_large",
    "malformed_json",
    "missing_field",
    "invalid_field",
    "runner_mismatch",
    "unsupported_event_type",
    "invalid_subject",
}
REQUEST_CODES = {"payload_too_large", "malformed_json", "missing_field", "invalid_field"}
TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-"
RAW = "@@raw{}@@"  # placeholder of a value spliced in as raw bytes after encoding

# The contract's field kinds (sections 1, 3, 4, 5, 6 and 9.1) -----------------------------------

TOKEN, RUNNER, TIME, ATTEMPT, INT, LIMIT, BOOL, TEXT, EVIDENCE, OBJECT = (
    "token runner time attempt int limit bool text evidence object".split()
)


@dataclass(frozen=True)
class Field:
    kind: str
    required: bool = True
    choices: tuple[str, ...] = ()  # a closed set (or the one literal of `type`)


SESSION = {
    "session": Field(OBJECT),
    "session.tenant": Field(TOKEN),
    "session.conversation_id": Field(TOKEN),
    "session.agent_id": Field(TOKEN),
}
TOOL_CALL = {
    "tool_call_id": Field(TOKEN),
    "tool_name": Field(TEXT),
    "started_at": Field(TIME),
    "recorded_outcome": Field(TEXT, False, ("completed", "not_performed")),
}
EVENT = {
    "type": Field(TEXT, True, ("resume_failed",)),
    "event_id": Field(TOKEN),
    "runner_id": Field(RUNNER),
    "run_id": Field(TOKEN),
    "attempt": Field(ATTEMPT),
    **SESSION,
    "native_session_id": Field(TOKEN),
    "occurred_at": Field(TIME),
    "error": Field(OBJECT, False),
    "error.type": Field(TEXT),
    "error.code": Field(TEXT),
    "error.message": Field(TEXT),
    "command_result": Field(OBJECT, False),
    "pending_tool_call": Field(OBJECT, False),
    **{f"pending_tool_call.{k}": f for k, f in TOOL_CALL.items()},
    "governed_wait_elapsed": Field(BOOL, False),
}
ARCHIVE_WORK = {
    "type": Field(TEXT, False, ("archive",)),
    "archive_id": Field(TOKEN),
    "runner_id": Field(RUNNER),
    "run_id": Field(TOKEN),
    "attempt": Field(ATTEMPT),
    **SESSION,
    "native_session_id": Field(TOKEN),
    "failure_class": Field(
        TEXT,
        True,
        (
            "provider_attach_refused",
            "provider_side_effect_pending",
            "source_reconciliation_required",
            "provider_state_incompatible",
            "event_replay_conflict",
            "unclassified",
        ),
    ),
}
RECONCILE_WORK = {
    "type": Field(TEXT, False, ("reconcile",)),
    "runner_id": Field(RUNNER),
    "run_id": Field(TOKEN),
    "attempt": Field(ATTEMPT),
    **SESSION,
    "native_session_id": Field(TOKEN),
    "tool_call": Field(OBJECT),
    **{f"tool_call.{k}": f for k, f in TOOL_CALL.items()},
    "recorded_outcome": Field(TEXT, False, ("completed", "not_performed")),
    "decision_id": Field(TEXT),
    "opened_at": Field(TIME),
}
POLICIES = (
    "same_session_only",
    "allow_replacement_after_governed_wait",
    "allow_replacement_after_resume_failure",
)
REQUESTS: dict[str, dict[str, Field]] = {
    subjects.SESSIONS_DECIDE: {
        **SESSION,
        "adapter": Field(TEXT),
        "model": Field(TEXT),
        "cwd": Field(TEXT),
        "latest_cursor": Field(TEXT, False),
        "compatibility": Field(TEXT, False, ("none", "profile-ready")),
        "ready_generation": Field(TOKEN, False),
    },
    subjects.SESSIONS_COMMIT: {
        **SESSION,
        "native_session_id": Field(TOKEN),
        "adapter": Field(TEXT),
        "model": Field(TEXT),
        "cwd": Field(TEXT),
        "cursor": Field(TEXT, False),
        "prompt_hash": Field(TEXT, False),
        "checkpoint_policy": Field(TEXT, True, POLICIES),
        "compatibility_generation": Field(TOKEN, False),
        "expected_revision": Field(INT, False),
        "epoch": Field(INT, False),
        "cancelled": Field(BOOL, False),
    },
    subjects.SESSIONS_GET: SESSION,
    subjects.SESSIONS_REJECT: {
        **SESSION,
        "native_session_id": Field(TOKEN),
        "code": Field(TEXT, True, ("resume_target_missing", "resume_target_corrupt")),
    },
    subjects.RECONCILIATIONS_LIST: {
        "status": Field(TEXT, False, ("open", "delivered")),
        "limit": Field(LIMIT, False),
    },
    subjects.RECONCILIATIONS_GET: {"run_id": Field(TOKEN)},
    subjects.RECONCILIATIONS_RESOLVE: {
        "run_id": Field(TOKEN),
        "action_outcome": Field(TEXT, True, ("completed", "not_performed", "mixed")),
        "evidence": Field(EVIDENCE),
        "actor": Field(TOKEN),
    },
    subjects.RUNS_GET: {"run_id": Field(TOKEN)},
    subjects.RUNS_AUDIT: {"run_id": Field(TOKEN)},
    subjects.OPERATOR_RETRY: {"run_id": Field(TOKEN), "actor": Field(TOKEN)},
}

# Valid messages ---------------------------------------------------------------------------------

_ids = itertools.count()


def new_id(prefix: str) -> str:
    return f"{prefix}-{next(_ids):07d}-{uuid.uuid4().hex[:8]}"  # one length: replays draw alike


def session_of(conversation: str) -> dict[str, str]:
    return {"tenant": "fuzz", "conversation_id": conversation, "agent_id": "agent"}


def tool_call() -> dict[str, Any]:
    return {"tool_call_id": new_id("tc"), "tool_name": "deploy", "started_at": "2026-11-30T12:00:00.000Z"}


EXPECTED_ACTION = {"retry": "retry_same_session", "operator": "operator", "reconcile": "reconcile"}


def valid_event(runner_id: str, kind: str) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "resume_failed",
        "event_id": new_id("ev"),
        "runner_id": runner_id,
        "run_id": new_id("run"),
        "attempt": 1,
        "session": session_of(new_id("conv")),
        "native_session_id": "ns-1",
        "occurred_at": "2026-11-30T12:00:00.123Z",
    }
    if kind == "operator":
        event["error"] = {"type": "E", "code": "native_event_replay_conflict", "message": "replay"}
    elif kind == "reconcile":
        event["pending_tool_call"] = tool_call()
    return event


def valid_archive_work(runner_id: str) -> dict[str, Any]:
    run_id = new_id("run")
    return {
        "type": "archive",
        "archive_id": f"{run_id}-1",
        "runner_id": runner_id,
        "run_id": run_id,
        "attempt": 1,
        "session": session_of(new_id("conv")),
        "native_session_id": "ns-1",
        "failure_class": "unclassified",
    }


def valid_reconcile_work(runner_id: str) -> dict[str, Any]:
    run_id = new_id("run")
    return {
        "type": "reconcile",
        "runner_id": runner_id,
        "run_id": run_id,
        "attempt": 1,
        "session": session_of(new_id("conv")),
        "native_session_id": "ns-1",
        "tool_call": tool_call(),
        "recorded_outcome": None,
        "decision_id": f"{run_id}:1:reconcile",
        "opened_at": "2026-11-30T12:00:00.000Z",
    }


def valid_request(subject: str, conversation: str, revision: int | None) -> dict[str, Any]:
    """A valid request on `subject`; commits and decides go to the example's own session."""
    session = session_of(conversation)
    unknown_run = new_id("run-unknown")
    if subject == subjects.SESSIONS_DECIDE:
        return {"session": session, "adapter": "a", "model": "m", "cwd": "/w", "latest_cursor": "c"}
    if subject == subjects.SESSIONS_COMMIT:
        return {
            "session": session,
            "native_session_id": "ns-1",
            "adapter": "a",
            "model": "m",
            "cwd": "/w",
            "cursor": "c",
            "checkpoint_policy": "same_session_only",
            "compatibility_generation": "gen-1",
            "expected_revision": revision,
        }
    if subject == subjects.SESSIONS_GET:
        return {"session": session}
    if subject == subjects.SESSIONS_REJECT:
        return {"session": session, "native_session_id": "ns-other", "code": "resume_target_missing"}
    if subject == subjects.RECONCILIATIONS_LIST:
        return {"status": "open", "limit": 5}
    if subject == subjects.RECONCILIATIONS_RESOLVE:
        return {"run_id": unknown_run, "action_outcome": "completed", "evidence": "seen", "actor": "op"}
    if subject == subjects.OPERATOR_RETRY:
        return {"run_id": unknown_run, "actor": "op"}
    return {"run_id": unknown_run}


# Bad messages ----------------------------------------------------------------------------------

WRONG_TYPE: dict[str, list[Any]] = {
    "str": [1, 2.5, True, [], {"k": "v"}],
    "int": ["1", 1.5, True, [], {"k": 1}],
    "bool": [1, "true", [], {"k": 1}],
    "object": [1, "x", [], True],
}


def _type_of(kind: str) -> str:
    return {ATTEMPT: "int", INT: "int", LIMIT: "int", BOOL: "bool", OBJECT: "object"}.get(kind, "str")


@dataclass
class Bad:
    """A bad payload and what it was made of (for the failure message), with the values that
    no error message may repeat."""

    category: str
    data: bytes
    injected: list[str] = field(default_factory=list)


def _get_parent(message: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    *parents, leaf = path.split(".")
    node = message
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    return node, leaf


def _encode(message: Any, raw: dict[str, bytes]) -> bytes:
    data = msgspec.json.encode(message)
    for placeholder, value in raw.items():
        data = data.replace(b'"' + placeholder.encode() + b'"', value)
    return data


def _paths(
    fields: dict[str, Field], message: dict[str, Any], predicate: Callable[[Field], bool]
) -> list[str]:
    """Paths of `fields` satisfying `predicate` whose parent object is in `message` (so that a
    mutation lands where the decoder looks)."""
    out = []
    for path, spec in fields.items():
        parent = path.rsplit(".", 1)[0] if "." in path else None
        if parent is not None and not isinstance(message.get(parent.split(".")[0]), dict):
            continue
        if predicate(spec):
            out.append(path)
    return out


def unknown_fields() -> st.SearchStrategy[dict[str, Any]]:
    values = st.recursive(
        st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=8,
    )
    return st.dictionaries(st.from_regex(r"x_[a-z]{1,8}", fullmatch=True), values, max_size=3)


@st.composite
def bad_payload(draw: st.DrawFn, fields: dict[str, Field], valid: dict[str, Any], category: str) -> Bad:
    """`valid` made invalid, the contract's way named by `category`."""
    message = msgspec.json.decode(msgspec.json.encode(valid))
    message.update(draw(unknown_fields()))
    raw: dict[str, bytes] = {}
    injected: list[str] = []

    def set_path(path: str, value: Any) -> None:
        parent, leaf = _get_parent(message, path)
        parent[leaf] = value

    def pick(predicate: Callable[[Field], bool]) -> str:
        return draw(st.sampled_from(_paths(fields, message, predicate)))

    if category == "garbage":
        # A NUL byte can start no JSON text, whatever follows.
        return Bad(category, b"\x00" + draw(st.binary(max_size=300)))
    if category == "truncated":
        data = _encode(message, raw)
        return Bad(category, data[: draw(st.integers(0, len(data) - 1))])
    if category == "not_object":
        top = draw(
            st.one_of(st.integers(), st.text(max_size=30), st.lists(st.integers(), max_size=3), st.none())
        )
        return Bad(category, msgspec.json.encode(top))
    if category == "wrong_type":
        path = pick(lambda f: True)
        set_path(path, draw(st.sampled_from(WRONG_TYPE[_type_of(fields[path].kind)])))
    elif category == "missing":
        path = pick(lambda f: f.required)
        parent, leaf = _get_parent(message, path)
        parent.pop(leaf, None)
    elif category == "over_long":
        path = pick(lambda f: f.kind in (TOKEN, RUNNER, EVIDENCE))
        limit = {TOKEN: 128, RUNNER: 64, EVIDENCE: 2000}[fields[path].kind]
        value = "".join(draw(st.lists(st.sampled_from("abcXYZ019"), min_size=8, max_size=8))) * (
            limit // 8 + draw(st.integers(1, 40))
        )
        set_path(path, value)
        injected.append(value[:64])
    elif category == "pattern":
        path = pick(lambda f: f.kind in (TOKEN, RUNNER, TIME))
        kind = fields[path].kind
        if kind == TIME:
            value = draw(
                st.sampled_from(
                    ["yesterday", "2026-11-30 12:00:00Z", "2026-11-30T12:00:00", "2026-11-30T12:00:00Z\n", ""]
                )
            )
        else:
            good = draw(st.text(TOKEN_CHARS.replace(".", "").replace(":", ""), min_size=1, max_size=20))
            bad = draw(
                st.sampled_from(
                    [" ", "/", "\n", "{", "*", ">", "é", "\x00"] + (["."] if kind == RUNNER else [])
                )
            )
            value = draw(st.sampled_from([good + bad, bad + good, good + bad + good, ""]))
        set_path(path, value)
        if len(value) >= 8:
            injected.append(value)
    elif category == "closed_set":
        path = pick(lambda f: bool(f.choices) or f.kind in (ATTEMPT, LIMIT))
        spec = fields[path]
        if spec.choices:
            value: Any = draw(
                st.text(TOKEN_CHARS, min_size=1, max_size=30).filter(lambda v: v not in spec.choices)
            )
            if len(value) >= 8:
                injected.append(value)
        elif spec.kind == ATTEMPT:
            value = draw(st.integers(-(2**31), 0))
        else:
            value = draw(st.one_of(st.integers(-(2**31), 0), st.integers(1001, 2**31)))
        set_path(path, value)
    elif category == "utf8_known":
        path = pick(lambda f: _type_of(f.kind) == "str")
        key = RAW.format(len(raw))
        raw[key] = (
            b'"ok'
            + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]))
            + b'"'
        )
        set_path(path, key)
    # The known decoding gaps (module docstring) -------------------------------------------
    elif category == "deep_nesting":
        depth = draw(st.integers(2_000, 60_000))
        key = RAW.format(len(raw))
        raw[key] = draw(
            st.sampled_from([b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth])
        )
        message["x_deep"] = key
    elif category == "utf8_unknown":
        key = RAW.format(len(raw))
        raw[key] = b'"' + draw(st.sampled_from([b"\xff\xfe", b"\xc3\x28", b"abc\x80"])) + b'"'
        message["x_bytes"] = key
    elif category == "impossible_time":
        path = pick(lambda f: f.kind == TIME)
        set_path(
            path,
            draw(
                st.sampled_from(
                    [
                        "2026-02-30T12:00:00Z",
                        "2026-13-01T00:00:00Z",
                        "2026-00-10T00:00:00Z",
                        "2026-11-31T12:00:00.5Z",
                        "2026-11-30T24:00:01Z",
                        "2026-11-30T12:60:00Z",
                        "2026-11-30T12:00:61Z",
                        "2026-11-30T12:00:00+25:00",
                        "2025-02-29T12:00:00Z",
                    ]
                )
            ),
        )
    elif category == "huge_int":
        path = pick(lambda f: f.kind in (ATTEMPT, INT))
        key = RAW.format(len(raw))
        number = draw(st.one_of(st.integers(2**53 + 1, 2**64), st.integers(10**19, 10**40)))
        sign = b"-" if fields[path].kind == INT and draw(st.booleans()) else b""
        raw[key] = sign + str(number).encode()
        set_path(path, key)
    elif category == "oversize_text":
        big = "z" * draw(st.integers(512 * 1024, 768 * 1024))
        candidates = _paths(fields, message, lambda f: f.kind == TEXT and not f.choices)
        if candidates:
            set_path(draw(st.sampled_from(candidates)), big)
        else:  # this message carries no free text: the same size in an unknown field
            message["x_big"] = big
    else:
        raise AssertionError(category)
    return Bad(category, _encode(message, raw), injected)


CORE = [
    "garbage",
    "truncated",
    "not_object",
    "wrong_type",
    "missing",
    "over_long",
    "pattern",
    "closed_set",
    "utf8_known",
]
GAPS = ["deep_nesting", "utf8_unknown", "impossible_time", "huge_int", "oversize_text"]
EVENT_ONLY = ["runner_mismatch", "unsupported_event_type", "invalid_subject"]


def _applicable(category: str, fields: dict[str, Field]) -> bool:
    kinds = {f.kind for f in fields.values()}
    needs = {
        "missing": any(f.required for f in fields.values()),
        "over_long": bool(kinds & {TOKEN, RUNNER, EVIDENCE}),
        "pattern": bool(kinds & {TOKEN, RUNNER, TIME}),
        "closed_set": any(f.choices for f in fields.values()) or bool(kinds & {ATTEMPT, LIMIT}),
        "utf8_known": any(_type_of(f.kind) == "str" for f in fields.values()),
        "impossible_time": TIME in kinds,
        "huge_int": bool(kinds & {ATTEMPT, INT}),
        "oversize_text": any(f.kind == TEXT and not f.choices for f in fields.values()),
    }
    return needs.get(category, True)


# Where decoding still has the known gaps: probed on the decoding every service uses -----------


def _rejects(data: bytes, struct: Any) -> bool:
    """Whether the shared decoding turns `data` into a sanitized `InvalidInput`."""
    try:
        decode(data, msgspec.json.Decoder(struct))
    except InvalidInput:
        return True
    except Exception:  # RecursionError and the like: a crash, not a rejection
        return False
    return False


def _gap_open(category: str) -> bool:
    """Whether `shared.contract.decoding` still accepts (or crashes on) this kind of bad input."""
    event = valid_event("r1", "retry")
    probes: dict[str, tuple[bytes, Any]] = {
        "deep_nesting": (b'{"run_id":"r-1","x":' + b"[" * 5000 + b"]" * 5000 + b"}", RunRequest),
        "utf8_unknown": (b'{"run_id":"r-1","x":"\xff"}', RunRequest),
        "impossible_time": (
            msgspec.json.encode({**event, "occurred_at": "2026-02-30T12:00:00Z"}),
            ResumeFailed,
        ),
        "huge_int": (msgspec.json.encode({**event, "attempt": 2**53 + 1}), ResumeFailed),
        "oversize_text": (
            msgspec.json.encode({**event, "error": {"type": "E", "code": "c", "message": "z" * 512 * 1024}}),
            ResumeFailed,
        ),
    }
    return not _rejects(*probes[category])


def gap(category: str) -> Any:
    return pytest.param(
        category,
        marks=pytest.mark.xfail(
            _gap_open(category),
            reason=f"shared.contract.decoding does not reject {category} yet (fixed with the decoding work)",
            strict=False,
        ),
    )


# The running services and what they produce ----------------------------------------------------


class StreamLog:
    """Every message of a stream, read in order by an ordered consumer, up to a known sequence."""

    def __init__(self, js: JetStreamContext, stream: str, subject: str) -> None:
        self.js = js
        self.stream = stream
        self.subject = subject
        self.last_seq = 0
        self.messages: list[Msg] = []
        self._sub: Any = None

    async def start(self) -> StreamLog:
        async def on(msg: Msg) -> None:
            self.messages.append(msg)
            self.last_seq = msg.metadata.sequence.stream

        self._sub = await self.js.subscribe(self.subject, stream=self.stream, cb=on, ordered_consumer=True)
        return self

    async def caught_up(self) -> bool:
        info = await self.js.stream_info(self.stream)
        return self.last_seq >= info.state.last_seq

    async def stop(self) -> None:
        await self._sub.unsubscribe()


@dataclass
class Stack:
    nc: Client
    js: JetStreamContext
    dead: StreamLog
    decisions: StreamLog

    async def settle(self) -> None:
        """Until every consumer has handled and acknowledged everything, in the order work
        flows (events, then the work items they lead to), and both logs read to the end."""

        async def idle() -> bool:
            for stream, durable in (
                (subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER),
                (subjects.WORK_STREAM, subjects.ARCHIVER_CONSUMER),
                (subjects.WORK_STREAM, subjects.RECONCILIATION_CONSUMER),
            ):
                info = await self.js.consumer_info(stream, durable)
                if info.num_pending or info.num_ack_pending:
                    return False
            return await self.dead.caught_up() and await self.decisions.caught_up()

        await wait_for(idle, timeout=30, interval=0.01, what="every consumer idle")

    def dead_letters(self, stream: str, seq: int) -> list[tuple[str, str]]:
        msg_id = f"dead:{stream}:{seq}"
        return [
            (m.subject, (m.headers or {}).get("Continuity-Dead-Reason", ""))
            for m in self.dead.messages
            if (m.headers or {}).get("Nats-Msg-Id") == msg_id
        ]

    def decisions_of(self, run_id: str) -> list[Decision]:
        out = []
        for m in self.decisions.messages:
            if run_id.encode() in m.data:
                decision = msgspec.json.decode(m.data, type=Decision)
                if decision.run_id == run_id:
                    out.append(decision)
        return out

    async def request(self, subject: str, data: bytes) -> tuple[int | None, dict[str, Any]]:
        reply = await self.nc.request(subject, data, timeout=10)
        status = (reply.headers or {}).get("Nats-Service-Error-Code")
        return (int(status) if status else None), msgspec.json.decode(reply.data)


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """The four services on servers of this module's own (the fuzz fills streams with
    garbage), retrying a transient failure only once so that one shows quickly as exhausted."""
    nats_server = NatsServer(tmp_path_factory.mktemp("fuzz-nats"))
    redis_server = RedisServer(tmp_path_factory.mktemp("fuzz-redis"))
    nats_server.start()
    redis_server.start()
    config = replace(make_config(nats_server.url, redis_server.url), max_deliver=2, nak_delay_s=0.05)
    try:
        async with AsyncExitStack() as apps:
            for app in (
                registry.load("session-store"),
                registry.load("classifier"),
                registry.load("archiver"),
                registry.load("reconciliation"),
            ):
                await apps.enter_async_context(running(app, config))
            nc = await nats.connect(nats_server.url)
            js = nc.jetstream()
            dead = await StreamLog(js, subjects.DEAD_STREAM, subjects.DEAD_ALL).start()
            decisions = await StreamLog(js, subjects.DECISIONS_STREAM, subjects.DECISIONS_ALL).start()
            yield Stack(nc, js, dead, decisions)
            await dead.stop()
            await decisions.stop()
            await nc.close()
    finally:
        nats_server.stop()
        redis_server.stop()


# Events and work items -------------------------------------------------------------------------

TARGETS: dict[str, tuple[dict[str, Field], str]] = {
    "event": (EVENT, subjects.EVENTS_STREAM),
    "archive": (ARCHIVE_WORK, subjects.WORK_STREAM),
    "reconcile": (RECONCILE_WORK, subjects.WORK_STREAM),
}


@dataclass
class Sent:
    what: str  # "bad", "event", "archive", "reconcile"
    run_id: str
    stream: str
    seq: int
    category: str = ""
    data: bytes = b""
    action: str = ""

    def describe(self) -> str:
        return f"{self.what} {self.category} on seq {self.seq}: {self.data[:160]!r}"


def _valid_for(target: str, runner_id: str, kind: str) -> tuple[dict[str, Any], str]:
    if target == "event":
        return valid_event(runner_id, kind), subjects.event(runner_id, "resume_failed")
    if target == "archive":
        return valid_archive_work(runner_id), subjects.WORK_ARCHIVE
    return valid_reconcile_work(runner_id), subjects.WORK_RECONCILE


async def fuzz_events(stack: Stack, data: st.DataObject, categories: list[str]) -> None:
    runner_id = new_id("fz")
    plan = data.draw(
        st.lists(
            st.sampled_from(["bad", "bad", "event", "archive", "reconcile"]), min_size=2, max_size=6
        ).filter(lambda p: "bad" in p),
        label="plan",
    )
    sent: list[Sent] = []
    for what in plan:
        kind = data.draw(st.sampled_from(sorted(EXPECTED_ACTION)), label="event kind")
        if what != "bad":
            message, subject = _valid_for(what, runner_id, kind)
            message.update(data.draw(unknown_fields(), label="unknown fields of a valid message"))
            msg_id = message.get("event_id") or f"work:{message['run_id']}:1:{what}"
            ack = await stack.js.publish(
                subject, msgspec.json.encode(message), headers={"Nats-Msg-Id": msg_id}
            )
            sent.append(
                Sent(what, message["run_id"], ack.stream, ack.seq, action=EXPECTED_ACTION.get(kind, ""))
            )
            continue
        target = data.draw(
            st.sampled_from(
                [t for t, (f, _) in TARGETS.items() if any(_applicable(c, f) for c in categories)]
            )
        )
        fields, _ = TARGETS[target]
        usable = [
            c for c in categories if _applicable(c, fields) and (target == "event" or c not in EVENT_ONLY)
        ]
        category = data.draw(st.sampled_from(usable), label="category")
        message, subject = _valid_for(target, runner_id, kind)
        if category == "runner_mismatch":
            payload = msgspec.json.encode({**message, "runner_id": f"{runner_id}-other"})
        elif category in ("unsupported_event_type", "invalid_subject"):
            payload = msgspec.json.encode(message)
            suffix = data.draw(st.sampled_from(["resume_started", "decision", "x"]))
            subject = (
                subjects.event(runner_id, suffix)
                if category == "unsupported_event_type"
                else f"{subjects.event(runner_id, 'resume_failed')}.{suffix}"
            )
        else:
            payload = data.draw(bad_payload(fields, message, category), label="bad payload").data
        ack = await stack.js.publish(subject, payload)
        sent.append(Sent("bad", message["run_id"], ack.stream, ack.seq, category, payload))

    await stack.settle()
    problems: list[str] = []
    for item in sent:
        dead = stack.dead_letters(item.stream, item.seq)
        decided = stack.decisions_of(item.run_id)
        if item.what == "bad":
            if len(dead) != 1 or dead[0][0] != subjects.DEAD_INVALID or dead[0][1] not in INVALID_REASONS:
                problems.append(f"{item.describe()} dead-lettered as {dead}")
            if decided:
                problems.append(f"{item.describe()} was decided: {[d.action for d in decided]}")
            continue
        if dead:
            problems.append(f"valid {item.what} {item.run_id} was dead-lettered: {dead}")
        if item.what == "reconcile":
            status, body = await stack.request(
                subjects.RECONCILIATIONS_GET, msgspec.json.encode({"run_id": item.run_id})
            )
            if status is not None or body.get("status") != "open":
                problems.append(f"valid reconcile work {item.run_id} opened no record: {status} {body}")
            continue
        expected = item.action if item.what == "event" else "retry_same_session"
        if [d.action for d in decided] != [expected]:
            problems.append(f"valid {item.what} {item.run_id}: decisions {[d.action for d in decided]}")
    assert not problems, "\n".join(problems)


def fuzz_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        derandomize=True,  # the same examples on every run, for CI
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: every example costs round trips
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


@fuzz_settings(90)
@given(data=st.data())
async def test_bad_events_and_work_items_are_dead_lettered_once_and_the_valid_ones_decided_once(
    stack: Stack, data: st.DataObject
) -> None:
    await fuzz_events(stack, data, CORE + EVENT_ONLY)


@pytest.mark.parametrize("category", [gap(c) for c in GAPS])
@fuzz_settings(12)
@given(data=st.data())
async def test_known_decoding_gaps_on_events_and_work_items(
    stack: Stack, category: str, data: st.DataObject
) -> None:
    await fuzz_events(stack, data, [category])


# Requests --------------------------------------------------------------------------------------


async def fuzz_requests(stack: Stack, data: st.DataObject, categories: list[str]) -> None:
    conversation = new_id("conv")
    revision: int | None = None
    plan = data.draw(
        st.lists(st.sampled_from(["bad", "bad", "valid"]), min_size=2, max_size=8).filter(
            lambda p: "bad" in p
        ),
        label="plan",
    )
    problems: list[str] = []
    for what in plan:
        if what == "valid":
            subject = data.draw(st.sampled_from(sorted(REQUESTS)), label="subject")
            message = valid_request(subject, conversation, revision)
            message.update(data.draw(unknown_fields(), label="unknown fields of a valid request"))
            status, body = await stack.request(subject, msgspec.json.encode(message))
            if subject == subjects.SESSIONS_COMMIT:
                if status is not None or body.get("revision") != (revision or 0) + 1:
                    problems.append(f"valid commit after revision {revision}: {status} {body}")
                revision = body.get("revision", revision)
            elif status not in (None, 404) or (status == 404 and body["error"]["code"] != "not_found"):
                problems.append(f"valid {subject}: {status} {body}")
            continue
        usable = {c: [s for s, f in REQUESTS.items() if _applicable(c, f)] for c in categories}
        category = data.draw(st.sampled_from([c for c, on in usable.items() if on]), label="category")
        subject = data.draw(st.sampled_from(usable[category]), label="subject")
        bad = data.draw(
            bad_payload(REQUESTS[subject], valid_request(subject, conversation, revision), category),
            label="bad payload",
        )
        reply = await stack.nc.request(subject, bad.data, timeout=10)
        headers = reply.headers or {}
        seen = f"{category} on {subject} ({bad.data[:120]!r})"
        try:
            error = msgspec.json.decode(reply.data)["error"]
        except (msgspec.MsgspecError, KeyError, TypeError):
            problems.append(f"{seen}: answered {headers.get('Nats-Service-Error-Code')} {reply.data[:200]!r}")
            continue
        if headers.get("Nats-Service-Error-Code") != "400" or error.get("code") not in REQUEST_CODES:
            problems.append(f"{seen}: answered {headers.get('Nats-Service-Error-Code')} {error}")
        text = f"{error.get('message')} {headers.get('Nats-Service-Error')}"
        if any(value in text for value in bad.injected) or len(str(error.get("message"))) > 300:
            problems.append(f"{seen}: the error repeats what it was sent: {text[:300]!r}")
    if revision is not None:
        # Nothing a bad request sent was written: the record has exactly the valid commits.
        status, body = await stack.request(
            subjects.SESSIONS_GET, msgspec.json.encode({"session": session_of(conversation)})
        )
        if status is not None or body.get("revision") != revision:
            problems.append(f"the session after the valid commits (revision {revision}): {status} {body}")
    assert not problems, "\n".join(problems)


@fuzz_settings(150)
@given(data=st.data())
async def test_bad_requests_get_a_400_with_a_code_and_the_valid_ones_their_answer(
    stack: Stack, data: st.DataObject
) -> None:
    await fuzz_requests(stack, data, CORE)


# No request has a time field: impossible times are fuzzed on events only.
@pytest.mark.parametrize("category", [gap(c) for c in GAPS if c != "impossible_time"])
@fuzz_settings(12)
@given(data=st.data())
async def test_known_decoding_gaps_on_requests(stack: Stack, category: str, data: st.DataObject) -> None:
    await fuzz_requests(stack, data, [category])
