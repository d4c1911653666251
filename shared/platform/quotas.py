"""Per-runner and per-tenant event rates, shared by every classifier replica (contract 10.6).

The bucket of a key lives in Redis (`shared.records.quotas.lease`: up to `burst` tokens, `rate`
more a second, on the server's clock). A replica does not ask Redis for every event: it leases
`lease_size` tokens at once and spends them here, so a flood costs one round trip per lease.
A lease lasts `LEASE_S`; what is left of it then is dropped, never returned, so leases can only
make the deployment admit less than one bucket would, except for the tokens leased and not yet
spent (at most `lease_size` per replica and key). When the bucket has no whole token, the
replica refuses the key's events here until the time Redis named, when it has one again.

The arithmetic is pure (`Held`, `spend`, `leased`); `LeasedBuckets` adds the leasing, one lease
of a key in flight per replica at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

LEASE_SHARE = 0.02
"""A lease is 2% of a second's rate (at least one token)."""
LEASE_S = 0.5
"""How long leased tokens may be spent; then they are dropped."""

Lease = Callable[[str, int], Awaitable[tuple[int, float]]]
"""Lease up to n tokens of a key's bucket: (tokens granted, seconds until one is there when
none was)."""


def lease_size(rate: float, burst: int) -> int:
    """Tokens leased at once: `LEASE_SHARE` of a second's rate, at least 1, and at most a tenth
    of the burst, so that a few replicas' leases never hold the whole burst."""
    return max(1, min(int(rate * LEASE_SHARE), burst // 10))


@dataclass(slots=True)
class Held:
    """What one replica holds of a key's bucket."""

    tokens: int = 0
    """Leased tokens not yet spent."""
    expires: float = 0.0
    """When they are dropped (the replica's monotonic clock)."""
    refused_until: float = 0.0
    """Until when the bucket has no whole token: events are refused here without asking."""


def spend(held: Held, now: float) -> float | None:
    """Spend a leased token at `now`: 0.0 when spent, the seconds to wait when the bucket was
    empty when last asked, None when a lease is needed first."""
    if held.tokens > 0 and now < held.expires:
        held.tokens -= 1
        return 0.0
    if now < held.refused_until:
        return held.refused_until - now
    return None


def leased(held: Held, now: float, granted: int, wait_s: float) -> float:
    """Take a lease's answer at `now` and spend its first token: 0.0 when granted (the rest is
    held until `LEASE_S`; anything left of an earlier lease is dropped), else the wait."""
    if granted > 0:
        held.tokens = granted - 1
        held.expires = now + LEASE_S
        held.refused_until = 0.0
        return 0.0
    held.tokens = 0
    held.refused_until = now + wait_s
    return wait_s


class LeasedBuckets:
    """One rate and burst for many keys (runners, or tenants), leased through `lease`."""

    MAX_KEYS = 100_000
    """Keys held at once; the least recently used is forgotten (its leased tokens dropped)."""

    def __init__(
        self, rate: float, burst: int, lease: Lease, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a rate above 0 and a burst of at least 1")
        self.rate = rate
        self.burst = burst
        self.size = lease_size(rate, burst)
        self._lease = lease
        self._clock = clock
        self._held: OrderedDict[str, Held] = OrderedDict()
        self._leasing: dict[str, asyncio.Future[None]] = {}

    def take_now(self, key: str) -> float | None:
        """`take` without a coroutine while this replica holds a lease or knows the bucket
        empty; None when a lease is needed (call `take`)."""
        return spend(self._held_of(key), self._clock())

    async def take(self, key: str) -> float:
        """Take a token of `key`: 0.0 when taken, else the seconds until the shared bucket has
        one again (nothing taken). A Redis failure of the lease propagates: the event is
        neither admitted nor refused (contract 10.6)."""
        while True:
            held = self._held_of(key)
            waited = spend(held, self._clock())
            if waited is not None:
                return waited
            pending = self._leasing.get(key)
            if pending is not None:  # another event of this key is leasing: share its answer
                await pending
                continue
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._leasing[key] = done
            try:
                granted, wait_s = await self._lease(key, self.size)
            finally:
                del self._leasing[key]
                done.set_result(None)  # the others look again (and lease again on a failure)
            return leased(held, self._clock(), granted, wait_s)

    def _held_of(self, key: str) -> Held:
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = Held()
            if len(self._held) > self.MAX_KEYS:
                self._held.popitem(last=False)
        else:
            self._held.move_to_end(key)
        return held
