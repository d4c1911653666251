"""The runs index: every run's status, reason, runner, tenant and time of its last decision, so
that `continuity.runs.list` finds runs without their ids.

It is kept from the decisions themselves: a durable consumer of CONTINUITY_DECISIONS
(`subjects.RUNS_INDEX_CONSUMER`) applies each decision to the run's entry, idempotently and in
the order of `decided_at` (then attempt, then a continuation after what it continues), so a
redelivered or reordered older decision never overwrites a newer one. The stream keeps a
week of decisions, and a new consumer starts at its beginning, so a first start indexes the
runs decided within that week.

Layout, built for Redis Cluster: the index is spread over `BUCKETS` buckets by a CRC-32 of
`run_id`, each under its own hash tag `{runs-<n>}`, so no key is hot and every script touches
one slot. A bucket holds `…:versions` (run_id -> `<version>|<status number>`), `…:entries`
(run_id -> entry JSON), `…:all` (run_ids by decision time) and `…:status:<status>` (the same,
one set per status). A listing merges the buckets in (time, run_id) order; its cursor is the
position of the page's last run, so the next page starts right after it whatever changed. A
run decided again meanwhile moves to its new time (it may be listed again, further on).

Entries may be stale (the run's last decision is recorded but not yet indexed, or the run
record expired): each listed run is checked against its run record, a run whose record has
another status is left out of that page, and an entry whose record is gone is removed.

Retention (contract section 9.9): the index keeps a run as long as its run record, no longer;
a finished run's, until CONTINUITY_HISTORY lists it (9.14), from where a listing reads it after.
`trim`, run by the service's refresher, looks at the entries decided more than a linger (or a
retention) ago (a record is kept that long after its last step, so only those can have
expired) and removes the ones whose run record is gone; never by time alone, since a run
waiting on a person keeps its record, and so its entry, until its next step. A round looks at a
bounded slice of each bucket and the next round goes on after it, so runs kept long never hold
the rest back.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import msgspec
from nats.aio.msg import Msg

from shared.contract import subjects
from shared.contract.decisions import Decision, RunOutcome
from shared.contract.decoding import InvalidInput, decode
from shared.contract.errors import ServiceError
from shared.contract.limits import MAX_EVENT_BYTES
from shared.contract.runs import RunEntry, RunsListReply, RunsListRequest
from shared.contract.tenancy import is_refusal
from shared.contract.times import epoch_of
from shared.contract.types import RunStatus
from shared.platform.logs import Log
from shared.platform.redis import Redis
from shared.records import keys, scripts
from shared.records.history import FINAL_STATUSES
from shared.records.history_listing import Filters
from shared.records.retention import DEFAULT, Retention
from shared.records.store import RunStore

from .cursor import PAGE_ITEMS_BYTES, BadCursor, decode_cursor, encode_cursor
from .history import History
from .listed_runs import ListedRuns, every_listed
from .step import TRIM_BATCH, entry_of, outcome_entry_of, version_of

log = Log("continuity.reconciliation.runs_index")

BUCKETS = keys.RUNS_INDEX_BUCKETS
STATUSES = scripts.RUN_STATUSES
bucket_of = keys.runs_index_bucket
bucket_keys = scripts.runs_index_keys
"""The keys of one bucket, in the order of the scripts' KEYS."""

_encode = msgspec.json.Encoder().encode
_entry = msgspec.json.Decoder(RunEntry)
_decision = msgspec.json.Decoder(Decision)
_outcome = msgspec.json.Decoder(RunOutcome)
_OUTCOME_SUFFIX = "." + subjects.outcomes("x").rsplit(".", 1)[1]


@dataclass(order=True)
class _Row:
    score: float
    member: bytes
    bucket: int = field(compare=False)
    entry: RunEntry | None = field(compare=False)


class _BucketReader:
    """A bucket's runs from a fixed lowest score, read in slices as the merge needs them."""

    def __init__(self, runs: RunStore, bucket: int, status: RunStatus | None, low: str, high: str) -> None:
        self.runs = runs
        self.bucket = bucket
        self.status = status
        self.low = low
        self.high = high
        self.offset = 0
        self.done = False

    async def slice(self, count: int) -> list[_Row]:
        if self.done:
            return []
        read = await self.runs.runs_index_read(
            self.bucket, self.status, self.low, self.high, self.offset, count
        )
        rows: list[_Row] = []
        for run_id, score, raw in read:
            try:
                entry = _entry.decode(raw) if raw else None
            except msgspec.MsgspecError:  # not written by this module: leave it out
                entry = None
            rows.append(_Row(score, bytes(run_id), self.bucket, entry))
        self.offset += len(rows)
        self.done = len(rows) < count
        return rows


STREAM = BUCKETS
"""The `_Row.bucket` of a run listed in CONTINUITY_HISTORY, read after the Redis buckets."""


class _StreamReader:
    """The runs listed in CONTINUITY_HISTORY, as a bucket's rows."""

    def __init__(self, listed: ListedRuns) -> None:
        self.listed = listed
        self.bucket = STREAM

    async def slice(self, count: int) -> list[_Row]:
        return [_Row(score, member, STREAM, entry) for score, member, entry in await self.listed.slice(count)]


class _Merged:
    """The buckets' rows in one order (score, then member), each bucket read a slice at a time."""

    def __init__(self, readers: list[_BucketReader | _StreamReader], chunk: int) -> None:
        self.readers = readers
        self.chunk = chunk
        self.heap: list[_Row] = []
        self.pending: dict[int, int] = {r.bucket: 0 for r in readers}
        """Rows of each bucket in the heap."""

    async def start(self) -> None:
        for reader in self.readers:
            for row in await reader.slice(self.chunk):
                heapq.heappush(self.heap, row)
        for row in self.heap:
            self.pending[row.bucket] += 1

    async def pop(self) -> _Row | None:
        """The next row; None when every bucket is read."""
        if not self.heap:
            return None
        row = heapq.heappop(self.heap)
        self.pending[row.bucket] -= 1
        if self.pending[row.bucket] == 0:
            # Its bucket's slice is used up: read on before anything later is taken.
            for more in await self.readers[row.bucket].slice(self.chunk):
                heapq.heappush(self.heap, more)
                self.pending[row.bucket] += 1
        return row


class RunsIndex:
    def __init__(self, client: Redis, retention: Retention = DEFAULT, history: History | None = None) -> None:
        self.redis = client
        self.runs = RunStore(client, retention)
        self.retention = retention
        self.history = history
        """Where finished runs move (contract 9.14): their entries stay listed for the
        retention after their records have left Redis."""
        self._trim_offsets = [0] * BUCKETS
        """Where each bucket's next trim round starts among its entries old enough to expire."""

    # Keeping it --------------------------------------------------------------------------

    async def apply(self, decision: Decision | RunOutcome) -> bool:
        """Index a decision, or an outcome (its final status, 4.6); False when the run's entry
        is already as new or newer."""
        entry = entry_of(decision) if isinstance(decision, Decision) else outcome_entry_of(decision)
        return await self.runs.runs_index_apply(
            entry.run_id,
            version_of(entry),
            _encode(entry),
            epoch_of(entry.updated_at),
            STATUSES.index(entry.status) + 1,
        )

    async def handle(self, msg: Msg) -> None:
        """The consumer's handler: returning acknowledges, raising redelivers. A message that is
        not a decision is skipped, not dead-lettered: a service published it and its runner has
        it already; the index has nothing to learn from it."""
        if is_refusal(msg.data):
            return  # a refused event's notice (contract 10.5): no run step, nothing to index
        try:
            decision: Decision | RunOutcome = (
                decode(msg.data, _outcome, max_bytes=MAX_EVENT_BYTES)
                if msg.subject.endswith(_OUTCOME_SUFFIX)
                else decode(msg.data, _decision, max_bytes=MAX_EVENT_BYTES)
            )
        except InvalidInput as err:
            log.warning("runs_index_skipped", code=err.code, stream_seq=msg.metadata.sequence.stream)
            return
        await self.apply(decision)
        if isinstance(decision, RunOutcome) and self.history is not None:
            await self.history.after_outcome(decision)

    async def _forget(self, entry: RunEntry) -> bool:
        """Drop an entry whose run record is gone (expired), unless a newer decision came."""
        return await self.runs.runs_index_forget(entry.run_id, version_of(entry))

    async def trim(self, now: float | None = None, batch: int = TRIM_BATCH) -> int:
        """One round: of at most `batch` entries per bucket whose run record may have expired
        (decided more than a linger or a retention before `now`), remove those whose record is
        gone; a finished run's entry goes once CONTINUITY_HISTORY lists the run (contract 9.14).
        Returns how many were removed."""
        now = time.time() if now is None else now
        kept_s = self.retention.run_s
        if self.history is not None:
            kept_s = min(kept_s, self.history.linger_s)
        cutoff = repr(now - kept_s)
        removed = 0
        for bucket in range(BUCKETS):
            offset = self._trim_offsets[bucket]
            reader = _BucketReader(self.runs, bucket, None, "-inf", cutoff)
            reader.offset = offset
            rows = await reader.slice(batch)
            known = [row.entry for row in rows if row.entry is not None]
            exists = [("EXISTS", keys.run(e.session.key, e.run_id)) for e in known]
            found_all = await self.redis.batch(exists) if exists else []
            gone = 0
            for entry, found in zip(known, found_all, strict=True):
                if not found and await self._may_forget(entry):
                    gone += int(await self._forget(entry))
            removed += gone
            # The removed entries no longer count before the next slice; at the end, start over.
            self._trim_offsets[bucket] = 0 if reader.done else offset + len(rows) - gone
        return removed

    async def _may_forget(self, entry: RunEntry) -> bool:
        """Whether the entry of a run whose record is gone may go: a finished run's only once
        the stream lists it (a failure to list it is logged; the next round tries again)."""
        if self.history is None or entry.status not in FINAL_STATUSES:
            return True
        try:
            return await self.history.listing.list_moved(entry)
        except Exception as exc:
            log.warning("history_listing_deferred", run_id=entry.run_id, error_type=type(exc).__name__)
            return False

    # Listing -----------------------------------------------------------------------------

    async def list_runs(self, req: RunsListRequest) -> RunsListReply:
        try:
            items, next_cursor = await self.page(req)
        except BadCursor:
            raise ServiceError(400, "invalid_field", "`cursor` is not a cursor of this list") from None
        return RunsListReply(items=items, next_cursor=next_cursor)

    async def page(
        self, req: RunsListRequest, max_bytes: int = PAGE_ITEMS_BYTES
    ) -> tuple[list[RunEntry], str | None]:
        """One page, oldest decision first, after `req.cursor`: at most `req.limit` runs and
        (but for a first run) at most `max_bytes` of them encoded, and the next page's cursor
        (None when no matching run follows)."""
        after = decode_cursor(req.cursor) if req.cursor is not None else None
        low = 0.0 if req.updated_after is None else epoch_of(req.updated_after)
        if after is not None:
            low = max(low, after[0])
        high = "+inf" if req.updated_before is None else f"({epoch_of(req.updated_before)!r}"
        chunk = min(max(req.limit, 32), 500)
        readers: list[_BucketReader | _StreamReader] = [
            _BucketReader(self.runs, b, req.status, repr(low), high) for b in range(BUCKETS)
        ]
        listed = self._listed(req, low)
        if listed is not None:
            readers.append(_StreamReader(listed))
        merged = _Merged(readers, chunk)
        await merged.start()

        async def next_match() -> _Row | None:
            while (row := await merged.pop()) is not None:
                if after is not None and (row.score, row.member) <= after:
                    continue
                if row.entry is not None and self._matches(row.entry, req):
                    return row
            return None

        items: list[RunEntry] = []
        size = 0
        last: tuple[float, bytes] | None = None
        while True:
            # Gather candidates for what is left of the page, then check them in one round trip.
            batch: list[_Row] = []
            while len(batch) < req.limit - len(items):
                found = await next_match()
                if found is None:
                    break
                batch.append(found)
            if not batch:
                return items, None
            for row, ok in zip(batch, await self._confirm(batch), strict=True):
                if not ok:
                    continue
                assert row.entry is not None
                encoded = len(_encode(row.entry)) + 1
                if items and size + encoded > max_bytes:
                    assert last is not None
                    return items, encode_cursor(*last)
                items.append(row.entry)
                size += encoded
                last = (row.score, row.member)
            if len(items) >= req.limit:
                if await next_match() is None:
                    return items, None
                assert last is not None
                return items, encode_cursor(*last)

    async def scan(self, req: RunsListRequest, slice_size: int = 500) -> AsyncIterator[list[RunEntry]]:
        """Every entry matching `req`'s filters, a bucket after the other, in slices, then the
        runs listed in the stream: for a reader of them all (a replay), where a listing's merged
        order and its checks against the run records would cost a round trip per page for
        nothing. A run both in Redis and listed (while its entry waits out the grace) is read
        once, from Redis."""
        low = 0.0 if req.updated_after is None else epoch_of(req.updated_after)
        high = "+inf" if req.updated_before is None else f"({epoch_of(req.updated_before)!r}"
        for bucket in range(BUCKETS):
            reader = _BucketReader(self.runs, bucket, req.status, repr(low), high)
            while not reader.done:
                rows = await reader.slice(slice_size)
                yield [row.entry for row in rows if row.entry is not None and self._matches(row.entry, req)]
        if self.history is None or not self._may_be_listed(req):
            return
        every = every_listed(
            self.history.listing,
            self._filters(req),
            low,
            None if req.updated_before is None else epoch_of(req.updated_before),
            time.time(),
            self.retention.run_s,
        )
        async for batch in every:
            matching = [e for e in batch if self._matches(e, req)]
            indexed = await self._indexed([e.run_id for e in matching])
            yield [e for e, known in zip(matching, indexed, strict=True) if not known]

    def _listed(self, req: RunsListRequest, low: float) -> ListedRuns | None:
        """The stream's side of a page, when runs listed there can match."""
        if self.history is None or not self._may_be_listed(req):
            return None
        high = None if req.updated_before is None else epoch_of(req.updated_before)
        return ListedRuns(
            self.history.listing, self._filters(req), low, high, time.time(), self.retention.run_s
        )

    @staticmethod
    def _may_be_listed(req: RunsListRequest) -> bool:
        return req.status is None or req.status in FINAL_STATUSES

    @staticmethod
    def _filters(req: RunsListRequest) -> Filters:
        return Filters(status=req.status, tenant=req.tenant, runner_id=req.runner_id, reason=req.reason)

    async def _indexed(self, run_ids: list[str]) -> list[bool]:
        """Whether each run has an entry in the Redis index."""
        if not run_ids:
            return []
        return [bool(f) for f in await self.redis.batch([_has_entry(run_id) for run_id in run_ids])]

    @staticmethod
    def _matches(entry: RunEntry, req: RunsListRequest) -> bool:
        return (
            (req.status is None or entry.status == req.status)
            and (req.runner_id is None or entry.runner_id == req.runner_id)
            and (req.tenant is None or entry.session.tenant == req.tenant)
            and (req.reason is None or entry.reason == req.reason)
        )

    async def _confirm(self, rows: list[_Row]) -> list[bool]:
        """Whether each run is listed as its entry says: a Redis entry's run record still has
        its status (entries of runs whose record is gone and not finished are removed); a run
        listed in the stream has no Redis entry, which then speaks for it."""
        commands: list[tuple[str | int, ...]] = []
        for row in rows:
            assert row.entry is not None
            if row.bucket == STREAM:
                commands.append(_has_entry(row.entry.run_id))
            else:
                commands.append(("HGET", keys.run(row.entry.session.key, row.entry.run_id), "status"))
        replies = await self.redis.batch(commands)
        confirmed: list[bool] = []
        for row, reply in zip(rows, replies, strict=True):
            assert row.entry is not None
            if row.bucket == STREAM:
                confirmed.append(not reply)
                continue
            if reply is None and self.history is not None and row.entry.status in FINAL_STATUSES:
                # Moved to the stream: listed from here until the trim lists it there (9.14).
                confirmed.append(True)
                continue
            if reply is None:
                try:
                    await self._forget(row.entry)
                except Exception as exc:  # the next listing tries again
                    log.warning("runs_index_prune_failed", error_type=type(exc).__name__)
            confirmed.append(reply is not None and reply.decode() == row.entry.status)
        return confirmed


def _has_entry(run_id: str) -> tuple[str, ...]:
    """The command that tells whether a run has an entry in the Redis index."""
    return ("HEXISTS", keys.runs_index_versions(bucket_of(run_id)), run_id)
