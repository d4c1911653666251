"""The listing of finished runs in CONTINUITY_HISTORY (contract 9.14): what
`continuity.runs.list`, `runs.stats` and the replay find of a run once its records, and with
them its runs index entry, have left Redis.

A run's listing is one message, its runs index entry (JSON), on a subject that holds what the
list filters on and the hour of its last step, so a filtered list reads only the hours it needs
and, in them, only the runs that match:

    continuity.history.list.<day>.<hour>.<status>.<tenant>.<runner_id>.<reason>.<run>

`day` and `hour` are whole days and hours since the epoch of the entry's `updated_at`; `tenant`
and `run` are base64url (a Token may hold `.`); status, runner_id and reason are subject tokens
as they are. The stream keeps one message per subject. A run_id used again after its records
left Redis is a new run (9.13), so its listing may land on another subject: a pointer,
`continuity.history.listed.<run>`, names the run's current listing, and the earlier one is
purged before the new one is published.

Nothing here is on the events' hot path: the runs index's trim lists a run once, after its run
record is gone, and removes its Redis entry only after the listing has stood for `GRACE_S`, so a
listing page that read the stream before the move and Redis after it still finds the run.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import msgspec
import nats.errors
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from nats.js.errors import BadRequestError, NotFoundError

from shared.contract import subjects
from shared.contract.runs import RunEntry
from shared.contract.times import epoch_of
from shared.records.history import HistoryReader, token

HOUR_S = 3600
DAY_S = 86_400
GRACE_S = 30.0
"""How long a listing stands before the run's Redis entry is removed: longer than a page takes."""
FETCH_BATCH = 500
"""Listing messages pulled per request."""
FETCH_TIMEOUT_S = 5.0
CONSUMER_IDLE_S = 30.0
"""An abandoned reader's consumer is removed by the server after this."""

ANY = "*"
FILTER_NOT_IN_STREAM = 10093
"""JetStream's error code for a consumer filter that no subject of the stream can match."""

_entry = msgspec.json.Decoder(RunEntry)
_encode = msgspec.json.Encoder().encode


class Pointer(msgspec.Struct, kw_only=True):
    """Which subject lists the run, and when (this host's clock) it was published."""

    subject: str
    at: float


_pointer = msgspec.json.Decoder(Pointer)


def hour_of(epoch: float) -> int:
    return int(epoch // HOUR_S)


def _listing(day: str, hour: str, status: str, tenant: str, runner_id: str, reason: str, run: str) -> str:
    return ".".join((subjects.HISTORY_LIST.rstrip("."), day, hour, status, tenant, runner_id, reason, run))


def listing_subject(entry: RunEntry) -> str:
    epoch = epoch_of(entry.updated_at)
    return _listing(
        str(int(epoch // DAY_S)),
        str(hour_of(epoch)),
        entry.status,
        token(entry.session.tenant),
        entry.runner_id,
        entry.reason,
        token(entry.run_id),
    )


def pointer_subject(run_id: str) -> str:
    return subjects.HISTORY_LISTED + token(run_id)


@dataclass(frozen=True)
class Filters:
    """The list's filters that a subject holds; None matches every value."""

    status: str | None = None
    tenant: str | None = None
    runner_id: str | None = None
    reason: str | None = None

    def subject(self, day: int | None = None, hour: int | None = None) -> str:
        """The filter subject of the listings in `day` (or `hour`), or in every day."""
        if hour is not None:
            day = hour * HOUR_S // DAY_S
        return _listing(
            ANY if day is None else str(day),
            ANY if hour is None else str(hour),
            self.status or ANY,
            ANY if self.tenant is None else token(self.tenant),
            self.runner_id or ANY,
            self.reason or ANY,
            ANY,
        )


@dataclass(frozen=True)
class Listed:
    """A run's listing: `missing`, `standing` (published less than the grace ago) or `settled`
    (published long enough ago for the run's Redis entry to go)."""

    code: str


class HistoryListing:
    def __init__(self, js: JetStreamContext, grace_s: float = GRACE_S) -> None:
        self._js = js
        self._copies = HistoryReader(js)
        self.grace_s = grace_s

    # Writing -------------------------------------------------------------------------------

    async def pointer(self, run_id: str) -> Pointer | None:
        try:
            msg = await self._js.get_last_msg(subjects.HISTORY_STREAM, pointer_subject(run_id))
        except NotFoundError:
            return None
        try:
            return _pointer.decode(msg.data or b"")
        except msgspec.MsgspecError:  # not written by this module: publish over it
            return None

    async def state(self, entry: RunEntry, now: float | None = None) -> tuple[Listed, Pointer | None]:
        """Whether the run is listed as `entry` says (`settled`, `standing`), or not (`missing`),
        and the pointer found."""
        now = time.time() if now is None else now
        current = await self.pointer(entry.run_id)
        if current is not None and current.subject == listing_subject(entry):
            return Listed("settled" if now - current.at >= self.grace_s else "standing"), current
        return Listed("missing"), current

    async def publish(self, entry: RunEntry, current: Pointer | None, now: float | None = None) -> None:
        """List a finished run whose records have left Redis. Safe to call again, and again
        after a crash at any point: the pointer is written last."""
        target = listing_subject(entry)
        if current is not None and current.subject != target:
            # The run_id's earlier run: its listing goes before this one is published.
            await self._js.purge_stream(subjects.HISTORY_STREAM, subject=current.subject)
        await self._js.publish(target, _encode(entry), stream=subjects.HISTORY_STREAM)
        at = time.time() if now is None else now
        pointer = _encode(Pointer(subject=target, at=at))
        await self._js.publish(pointer_subject(entry.run_id), pointer, stream=subjects.HISTORY_STREAM)

    async def list_moved(self, entry: RunEntry) -> bool:
        """List a finished run whose run record is gone (the runs index's trim); True once its
        Redis entry may go: listed for the grace, or no copy of the run in the stream to list
        (its records expired whole, never moved: section 9.9)."""
        listed, current = await self.state(entry)
        if listed.code != "missing":
            return listed.code == "settled"
        if not await self._copies.exists(entry.run_id):
            return True
        await self.publish(entry, current)
        return False

    # Reading -------------------------------------------------------------------------------

    async def count(self, filter_subject: str) -> int:
        """How many listings match (a consumer's pending count, the consumer removed again)."""
        info = await self._reader(filter_subject)
        if info is None:
            return 0
        try:
            return int(info.num_pending or 0)
        finally:
            await self._delete(info.name)

    async def read(self, filter_subject: str, batch: int = FETCH_BATCH) -> AsyncGenerator[list[RunEntry]]:
        """Every listing that matches, in the stream's order, `batch` at a time."""
        info = await self._reader(filter_subject)
        if info is None:
            return
        try:
            left = int(info.num_pending or 0)
            if left == 0:
                return
            sub = await self._js.pull_subscribe_bind(consumer=info.name, stream=subjects.HISTORY_STREAM)
            try:
                while left > 0:
                    try:
                        msgs = await sub.fetch(min(batch, left), timeout=FETCH_TIMEOUT_S)
                    except nats.errors.TimeoutError:  # fewer than counted: aged out meanwhile
                        return
                    left -= len(msgs)
                    yield [e for e in (_decode(m.data) for m in msgs) if e is not None]
            finally:
                await sub.unsubscribe()
        finally:
            await self._delete(info.name)

    async def _reader(self, filter_subject: str) -> ConsumerInfo | None:
        """A consumer of the listings that match; None when the stream can hold none: there is
        no stream yet, or it takes none of the history's subjects (a server of 2.9 refuses the
        filter then; later ones count nothing)."""
        try:
            return await self._js.add_consumer(subjects.HISTORY_STREAM, config=_reader_config(filter_subject))
        except NotFoundError:
            return None
        except BadRequestError as err:
            if err.err_code == FILTER_NOT_IN_STREAM:
                return None
            raise

    async def _delete(self, name: str | None) -> None:
        if name is None:
            return
        try:
            await self._js.delete_consumer(subjects.HISTORY_STREAM, name)
        except NotFoundError:  # already gone (idle)
            pass


def _reader_config(filter_subject: str) -> ConsumerConfig:
    return ConsumerConfig(
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.NONE,
        filter_subject=filter_subject,
        inactive_threshold=CONSUMER_IDLE_S,
        mem_storage=True,
        num_replicas=1,
    )


def _decode(data: bytes) -> RunEntry | None:
    try:
        return _entry.decode(data)
    except msgspec.MsgspecError:  # not written by this module: not a listing
        return None
