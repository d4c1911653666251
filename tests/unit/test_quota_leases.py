"""The lease arithmetic of the shared event-rate quotas (shared/platform/quotas.py, contract
10.6): how many tokens a replica leases, how it spends them, and what leasing costs the
deployment against one bucket."""

from __future__ import annotations

import math

import pytest

from shared.platform.quotas import LEASE_S, Held, LeasedBuckets, lease_size, leased, spend


@pytest.mark.parametrize(
    ("rate", "burst", "size"),
    [
        (200.0, 1000, 4),  # the runner's defaults: 2% of a second's rate
        (2000.0, 10000, 40),  # the tenant's
        (0.5, 2, 1),  # at least one token
        (0.001, 6, 1),
        (1000.0, 50, 5),  # never more than a tenth of the burst
        (1000.0, 5, 1),
    ],
)
def test_a_lease_is_two_percent_of_the_rate_at_least_one_at_most_a_tenth_of_the_burst(
    rate: float, burst: int, size: int
) -> None:
    assert lease_size(rate, burst) == size


def test_leased_tokens_are_spent_here_until_they_run_out() -> None:
    held = Held()
    assert spend(held, 10.0) is None  # nothing held: lease first
    assert leased(held, 10.0, 3, 0.0) == 0.0  # the first of three spent at once
    assert [spend(held, 10.1), spend(held, 10.2)] == [0.0, 0.0]
    assert spend(held, 10.3) is None  # all three spent: lease again


def test_leased_tokens_left_when_the_lease_expires_are_dropped() -> None:
    held = Held()
    leased(held, 10.0, 4, 0.0)
    assert spend(held, 10.0 + LEASE_S - 0.01) == 0.0
    assert spend(held, 10.0 + LEASE_S) is None  # two left, but too old to spend
    leased(held, 11.0, 2, 0.0)
    assert held.tokens == 1  # a new lease replaces what was left, never adds to it


def test_an_empty_bucket_refuses_here_until_the_time_redis_named() -> None:
    held = Held()
    assert leased(held, 10.0, 0, 0.25) == 0.25
    assert spend(held, 10.1) == pytest.approx(0.15)  # refused without asking again
    assert spend(held, 10.25) is None  # then asked again
    assert leased(held, 10.25, 1, 0.0) == 0.0
    assert held.refused_until == 0.0


def test_buckets_refuse_a_rate_of_zero_or_no_burst() -> None:
    async def never(key: str, wanted: int) -> tuple[int, float]:
        raise AssertionError("no lease")

    with pytest.raises(ValueError):
        LeasedBuckets(0.0, 10, never)
    with pytest.raises(ValueError):
        LeasedBuckets(10.0, 0, never)


class _Bucket:
    """The shared bucket as event_lease.lua keeps it (tokens, refill at `rate`, capped at
    `burst`), to count what replicas' leases let through."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, float(burst), 0.0

    def lease(self, now: float, wanted: int) -> tuple[int, float]:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        granted = min(wanted, math.floor(self.tokens))
        self.tokens -= granted
        return granted, (0.0 if granted else math.ceil((1 - self.tokens) * 1000 / self.rate) / 1000)


def _deployment(replicas: int, rate: float, burst: int, offered: float, seconds: float) -> int:
    """Events accepted by `replicas` replicas sharing one bucket, the runner offering `offered`
    events a second spread over them in turn."""
    bucket, size = _Bucket(rate, burst), lease_size(rate, burst)
    held = [Held() for _ in range(replicas)]
    accepted = 0
    for i in range(int(offered * seconds)):
        now, mine = i / offered, held[i % replicas]
        waited = spend(mine, now)
        if waited is None:
            granted, wait_s = bucket.lease(now, size)
            waited = leased(mine, now, granted, wait_s)
        accepted += waited == 0.0
    return accepted


@pytest.mark.parametrize("replicas", [1, 3, 5])
@pytest.mark.parametrize("offered", [1.5, 3.0, 10.0])
def test_replicas_leasing_from_one_bucket_accept_its_rate_within_ten_percent(
    replicas: int, offered: float
) -> None:
    rate, burst, seconds = 200.0, 200, 20.0
    accepted = _deployment(replicas, rate, burst, offered * rate, seconds)
    # One bucket accepts its burst and then its rate; leases move that by under 10% of the rate.
    measured = (accepted - burst) / seconds
    assert abs(measured / rate - 1.0) <= 0.10, (replicas, offered, measured)
    # and never more than the bucket gave out plus what the leases held
    assert accepted <= burst + rate * seconds + replicas * lease_size(rate, burst)


def test_a_burst_only_bucket_is_spent_exactly_once_whatever_the_replicas() -> None:
    assert _deployment(3, 0.001, 6, 100.0, 1.0) == 6
