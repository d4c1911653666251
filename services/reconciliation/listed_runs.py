"""Finished runs listed in CONTINUITY_HISTORY (`shared.records.history_listing`), read for the
runs list in the runs index's order: (time of the last step, run_id), from a lowest time on.

Each day's matching listings are counted first: a day with none is passed over, a day with
few is read at once, and a larger one an hour at a time (sorted here), so a page costs what its
days and hours hold, not what the stream holds. Days are counted ahead, concurrently, more of
them after each day found empty: a first page passes over up to two retentions of days, most of
them empty. How far back to look: a listing is published after its run's last step, and the
stream keeps it for the retention, so no listed run's last step is more than two retentions
(and a margin for a migration's late moves) before now.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import aclosing

from shared.contract.runs import RunEntry
from shared.contract.times import epoch_of
from shared.records.history_listing import DAY_S, HOUR_S, Filters, HistoryListing, hour_of

Row = tuple[float, bytes, RunEntry]
"""A listed run as the index orders it: (its last step's time, run_id, entry)."""

DAY_READ_MAX = 2000
"""A day's matching listings read at once, sorted here, when there are no more than this; an
hour at a time beyond it (an hour of a million runs kept 30 days is about 1,400)."""
SKEW_S = DAY_S
"""Margin for the clocks of the hosts that stamped `updated_at` and the listing."""
COUNTED_AHEAD_MAX = 8
"""The most days counted at once (concurrent requests). One day is counted first; after each
count that finds nothing, twice as many next, up to this."""


def span_s(retention_s: float) -> float:
    """How far before now a listed run's last step can be."""
    return 2 * retention_s + 2 * DAY_S


def _looked_at(low: float, high: float | None, now: float, retention_s: float) -> tuple[float, float]:
    """The first and last instants where a listed run's last step can be, within the bounds."""
    return max(low, now - span_s(retention_s)), now + SKEW_S if high is None else min(high, now + SKEW_S)


class ListedRuns:
    """The stream's runs for one list page, in order, from `low` (inclusive) to `high`
    (exclusive, None for no bound)."""

    def __init__(
        self,
        listing: HistoryListing,
        filters: Filters,
        low: float,
        high: float | None,
        now: float,
        retention_s: float,
    ) -> None:
        self.listing = listing
        self.filters = filters
        self.low = low
        self.high = high
        first, last = _looked_at(low, high, now, retention_s)
        self.hour, self.last_hour = hour_of(first), hour_of(last)
        self.buffer: deque[Row] = deque()
        self._day_seen: int | None = None
        self._any: bool | None = None
        self._counts: dict[int, int] = {}
        """Days counted ahead and not yet read."""
        self._ahead = 1

    async def slice(self, count: int) -> list[Row]:
        """The next `count` runs at most; an empty list only once every hour is read."""
        if self._any is None:
            self._any = await self.listing.count(self.filters.subject()) > 0
        while self._any and not self.buffer and self.hour <= self.last_hour:
            await self._read_hour()
        return [self.buffer.popleft() for _ in range(min(count, len(self.buffer)))]

    async def _read_hour(self) -> None:
        day = self.hour * HOUR_S // DAY_S
        if day != self._day_seen:
            self._day_seen = day
            count = await self._day_count(day)
            if count <= DAY_READ_MAX:
                # None, or few enough to read the day at once rather than hour by hour.
                if count:
                    await self._read(self.filters.subject(day=day))
                self.hour = (day + 1) * DAY_S // HOUR_S
                return
        await self._read(self.filters.subject(hour=self.hour))
        self.hour += 1

    async def _day_count(self, day: int) -> int:
        """`day`'s matching listings, counted with the next days when it was not counted yet."""
        if day not in self._counts:
            days = range(day, min(day + self._ahead, self.last_hour * HOUR_S // DAY_S + 1))
            # Every count finished before a failure is raised: none is left running unawaited.
            found = await asyncio.gather(
                *(self.listing.count(self.filters.subject(day=d)) for d in days), return_exceptions=True
            )
            failed = [error for error in found if isinstance(error, BaseException)]
            if failed:
                raise failed[0]
            counts = [n for n in found if not isinstance(n, BaseException)]
            self._counts.update(zip(days, counts, strict=True))
            self._ahead = min(self._ahead * 2, COUNTED_AHEAD_MAX) if not any(counts) else 1
        return self._counts.pop(day)

    async def _read(self, filter_subject: str) -> None:
        rows: list[Row] = []
        async with aclosing(self.listing.read(filter_subject)) as batches:
            async for batch in batches:
                rows.extend(row for row in map(_row, batch) if _inside(row[0], self.low, self.high))
        rows.sort(key=lambda row: (row[0], row[1]))
        self.buffer.extend(rows)


async def every_listed(
    listing: HistoryListing, filters: Filters, low: float, high: float | None, now: float, retention_s: float
) -> AsyncIterator[list[RunEntry]]:
    """Every listed run that matches, a day at a time, in no particular order (a replay's
    reading of them all, where a page's order would cost a sort for nothing)."""
    if await listing.count(filters.subject()) == 0:
        return
    first, last = _looked_at(low, high, now, retention_s)
    for day in range(int(first // DAY_S), int(last // DAY_S) + 1):
        async with aclosing(listing.read(filters.subject(day=day))) as batches:
            async for batch in batches:
                kept = [e for e in batch if _inside(epoch_of(e.updated_at), low, high)]
                if kept:
                    yield kept


def _row(entry: RunEntry) -> Row:
    return epoch_of(entry.updated_at), entry.run_id.encode(), entry


def _inside(score: float, low: float, high: float | None) -> bool:
    return score >= low and (high is None or score < high)
