"""Finished runs' history in JetStream (contract 9.14).

A run that reaches a final status (4.6) and has no open reconciliation is copied, every record
of it, to the stream CONTINUITY_HISTORY (file-backed, replicated, the retention as its age
limit) under a subject of its own, `continuity.history.run.<run_id in base64url>`; one message
per subject is kept, so a later copy replaces an earlier one. Once the stream has acknowledged
the copy, the Redis records are given the linger (`CONTINUITY_HISTORY_LINGER_S`) instead of the
retention: they stay while a runner may still send a report again (9.13), and a reader finds
the run in Redis or, after that, in the stream, by the last message of its subject.

The copy is made from Redis as it is; a crash between the copy and the linger leaves the
records for the retention as before and the next attempt copies them again (the subject keeps
one message), so nothing is lost or kept twice.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import get_args

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from shared.contract import subjects
from shared.contract.types import OutcomeStatus
from shared.platform.bus.streams import ensure_stream, history_stream_config
from shared.platform.config import Config
from shared.platform.redis import Redis
from shared.platform.redis.store import pairs
from shared.records import keys, scripts
from shared.records.names import archive_id

FINAL_STATUSES: frozenset[str] = frozenset(get_args(OutcomeStatus))
"""The final statuses (4.6), whose runs move: a run in one takes no further step but, after
`abandoned`, a late turn's outcome (copied again then, over the earlier copy)."""


class RunHistory(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Every record of one run, as Redis held it (each field's value as stored, text)."""

    run_id: str
    session_key: str
    moved_at: float
    run: dict[str, str]
    decisions: dict[str, str] = {}
    audit: list[str] = []
    """The audit trail's entries (JSON), oldest first."""
    reconciliation: dict[str, str] = {}
    reconciliation_history: list[str] = []

    def raw(self, fields: dict[str, str]) -> dict[bytes, bytes]:
        """A hash of it as HGETALL answers it, for the parsers of the Redis records."""
        return {k.encode(): v.encode() for k, v in fields.items()}

    @property
    def status(self) -> str:
        return self.run.get("status", "")


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(RunHistory).decode


def token(text: str) -> str:
    """`text` as one subject token: base64url, unpadded (a run_id or a tenant may hold '.',
    which a subject token cannot)."""
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def subject(run_id: str) -> str:
    """The run's subject."""
    return subjects.HISTORY_RUN + token(run_id)


def encode(history: RunHistory) -> bytes:
    return _encode(history)


def decode(data: bytes) -> RunHistory:
    return _decode(data)


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _text_map(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in raw.items()}


async def read_records(redis: Redis, sk: str, run_id: str) -> RunHistory | None:
    """The run's records in Redis, in one round trip; None when it has no run record."""
    run, decisions, audit, reconciliation, earlier = await redis.batch(
        [
            ("HGETALL", keys.run(sk, run_id)),
            ("HGETALL", keys.run_decisions(sk, run_id)),
            ("LRANGE", keys.run_audit(sk, run_id), 0, -1),
            ("HGETALL", keys.reconciliation(sk, run_id)),
            ("LRANGE", keys.reconciliation_history(sk, run_id), 0, -1),
        ]
    )
    if not run:
        return None
    fields = _text_map(pairs(run))
    fields.pop("history", None)  # the mark of an earlier copy, not a record's field
    return RunHistory(
        run_id=run_id,
        session_key=sk,
        moved_at=time.time(),
        run=fields,
        decisions=_text_map(pairs(decisions)),
        audit=[_text(item) for item in audit],
        reconciliation=_text_map(pairs(reconciliation)),
        reconciliation_history=[_text(item) for item in earlier],
    )


def movable(history: RunHistory) -> bool:
    """Whether the run is over: a final status, and no reconciliation waiting on a person."""
    return history.status in FINAL_STATUSES and history.reconciliation.get("status") != "open"


class HistoryReader:
    """Finished runs read back from the stream."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def exists(self, run_id: str) -> bool:
        try:
            await self._js.get_last_msg(subjects.HISTORY_STREAM, subject(run_id))
        except NotFoundError:
            return False
        return True

    async def load(self, run_id: str) -> RunHistory | None:
        try:
            # The stream's message get, answered by its leader: a direct get is not answered
            # for a subject without a message by every release this supports (2.9 sends none).
            msg = await self._js.get_last_msg(subjects.HISTORY_STREAM, subject(run_id))
        except NotFoundError:  # no message on the subject, or no stream yet
            return None
        if not msg.data:
            return None
        return decode(msg.data)


@dataclass(frozen=True)
class Moved:
    """What `HistoryMover.move` did: `moved`, `not_found` (no run record), `not_finished`,
    or `changed` (a step was recorded between the copy and the linger: copied again later)."""

    code: str
    ttl_ms: int = -2


class HistoryMover:
    """Copies a finished run to the stream (created when missing), then gives its Redis records
    the linger."""

    def __init__(self, redis: Redis, js: JetStreamContext, config: Config) -> None:
        self._redis = redis
        self._js = js
        self._stream = history_stream_config(config)
        self._ready = False
        self._linger_ms = max(1, round(config.history_linger_s * 1000))

    async def ensure(self) -> None:
        """Create the stream when missing (once per mover)."""
        if not self._ready:
            await ensure_stream(self._js, self._stream)
            self._ready = True

    async def move(self, sk: str, run_id: str) -> Moved:
        history = await read_records(self._redis, sk, run_id)
        if history is None:
            return Moved("not_found")
        if not movable(history):
            return Moved("not_finished")
        await self.ensure()
        await self._js.publish(
            subject(run_id),
            encode(history),
            stream=subjects.HISTORY_STREAM,
            headers={"Nats-Msg-Id": f"history:{run_id}:{history.status}:{len(history.audit)}"},
        )
        code, ttl = await self._redis.script(
            scripts.HISTORY_MOVED,
            [*scripts.step_keys(sk, run_id), *_archive_progress(sk, run_id, history)],
            [history.status, str(len(history.audit)), str(self._linger_ms)],
        )
        if code != 1:
            return Moved("changed")
        await _follow(self._redis, run_id, int(ttl))
        return Moved("moved", int(ttl))


def _archive_progress(sk: str, run_id: str, history: RunHistory) -> list[str]:
    """The archiver's progress keys of the run's attempts: its working state, read by nothing
    once the run has ended, so not copied, only given the linger with the rest."""
    attempt = history.run.get("attempt", "")
    attempts = int(attempt) if attempt.isdigit() else 0
    return [keys.archive_progress(sk, archive_id(run_id, n)) for n in range(1, attempts + 1)]


async def _follow(redis: Redis, run_id: str, ttl_ms: int) -> None:
    """The run index lingers with the run record (`RunStore.follow_run`'s rule)."""
    if ttl_ms > 0:
        await redis.execute("PEXPIRE", keys.run_index(run_id), ttl_ms)
