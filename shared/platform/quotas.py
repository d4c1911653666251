"""Per-runner and per-tenant event rates: token buckets, one per key, in one replica's memory.

A bucket holds up to `burst` tokens and gains `rate` a second; an event takes one. An event
finding its bucket empty is refused with the time at which a token will be there again. The
buckets live in the classifier's memory, so with N replicas a key may send up to N times the
rate; the contract says so (10.6). A bounded number of buckets is kept: the least recently
used go first, which only forgives a key's spent tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class TokenBuckets:
    MAX_KEYS = 100_000

    def __init__(self, rate: float, burst: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a rate above 0 and a burst of at least 1")
        self.rate = rate
        self.burst = burst
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def take(self, key: str, now: float) -> float:
        """Take a token for `key` at `now` (seconds): 0.0 when taken, else how many seconds
        until one is there (nothing taken)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(self.burst, now)
            self._buckets[key] = bucket
            if len(self._buckets) > self.MAX_KEYS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / self.rate
