"""Reading a stream by sequence, without a consumer: the stream's info for its first and last
sequence, and one message at a time (`$JS.API.STREAM.MSG.GET.<stream>`).

A consumer create request may name any deliver subject, which the server does not check against
the permissions of the user who sends it: whoever may create a consumer may have a stream's
messages published on any subject of the account. The users that only read streams (the
console, the operator's `continuity watch` and `continuity dead`) read them this way and hold
no consumer right at all (docs/operations/nats-authorization.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError


@dataclass(frozen=True)
class Bounds:
    """The sequences a stream holds now: from `first` to `last` (an empty stream: last < first,
    or both 0 before its first message)."""

    first: int
    last: int


async def bounds(js: JetStreamContext, stream: str) -> Bounds:
    state = (await js.stream_info(stream)).state
    return Bounds(state.first_seq, state.last_seq)


async def forward(
    js: JetStreamContext, stream: str, subject: str, first: int, last: int
) -> AsyncIterator[RawStreamMsg]:
    """The messages on `subject` (a filter: wildcards allowed) from sequence `first` to `last`,
    oldest first, a request each; sequences removed meanwhile, or on other subjects, are
    skipped (the server finds the next one: `next_by_subj`)."""
    seq = max(first, 1)
    while seq <= last:
        try:
            raw = await js.get_msg(stream, seq, subject=subject, next=True)
        except NotFoundError:  # nothing on the subject from `seq` on
            return
        seq = raw.seq or seq
        if seq > last:
            return
        yield raw
        seq += 1


async def between(
    js: JetStreamContext, stream: str, subject: str, first: int, last: int
) -> list[RawStreamMsg]:
    """`forward`'s messages as a list."""
    return [raw async for raw in forward(js, stream, subject, first, last)]


async def backward(js: JetStreamContext, stream: str, first: int, last: int) -> AsyncIterator[RawStreamMsg]:
    """The messages from sequence `last` down to `first`, newest first, a request each; a
    sequence removed meanwhile is skipped."""
    for seq in range(last, max(first, 1) - 1, -1):
        try:
            yield await js.get_msg(stream, seq)
        except NotFoundError:
            continue


async def first_since(
    js: JetStreamContext, stream: str, subject: str, since: datetime, within: Bounds
) -> int:
    """The sequence from which to read the messages on `subject` stored at or after `since`:
    every message on `subject` before it is older. A binary search over the stream's sequences,
    a request per step, since a stream stores its messages in the order of their times."""
    lo, hi = max(within.first, 1), within.last + 1

    async def after(seq: int) -> int | None:
        """The sequence of the first message on `subject` from `seq` on when it is older than
        `since`; None when it is not, or when there is none."""
        try:
            raw = await js.get_msg(stream, seq, subject=subject, next=True)
        except NotFoundError:
            return None
        found = raw.seq or seq
        if found > within.last or raw.time is None or raw.time >= since:
            return None
        return found

    # Every sequence below `lo` starts older messages; reading from `hi` shows none that is.
    while lo < hi:
        mid = (lo + hi) // 2
        older = await after(mid)
        if older is None:
            hi = mid
        else:
            lo = older + 1
    return lo
