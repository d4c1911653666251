"""RFC 3339 timestamps as the contract writes them, from the formatter's small cache of
seconds: alternating and many seconds give the same text as formatting each afresh."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.contract.times import rfc3339_from_epoch


def expected(seconds: float) -> str:
    moment = datetime.fromtimestamp(int(seconds), UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{int((seconds - int(seconds)) * 1000):03d}Z"


def test_now_and_a_retry_ahead_alternate() -> None:
    now = 1_800_000_000.25
    for i in range(50):
        for t in (now + i * 0.01, now + 5.0 + i * 0.01, now + 10.0):
            assert rfc3339_from_epoch(t) == expected(t)


def test_many_seconds_and_their_milliseconds() -> None:
    start = 1_796_000_000.0
    values = [start + i * 0.7 for i in range(200)] + [start + 0.999, start + 86_399.5, 0.001]
    assert [rfc3339_from_epoch(t) for t in values] == [expected(t) for t in values]
    assert rfc3339_from_epoch(1_800_000_000.25) == "2027-01-15T08:00:00.250Z"
