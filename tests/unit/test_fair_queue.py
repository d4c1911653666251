"""The fair queue of held messages (shared/platform/bus/fair.py): keys in rotation, bounded shares."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.platform.bus.fair import FairQueue


def test_a_flood_of_one_key_does_not_hold_back_another() -> None:
    q: FairQueue[int] = FairQueue(per_key=1000)
    for i in range(1000):
        q.push("flood", i)
    q.push("quiet", -1)
    started = [q.pop() for _ in range(3)]
    assert ("quiet", -1) in started  # in arrival order it would have been the 1001st


def test_keys_are_served_in_rotation() -> None:
    q: FairQueue[str] = FairQueue(per_key=10)
    for key in "aab":
        q.push(key, key)
    q.push("c", "c")
    assert [q.pop() for _ in range(4)] == [("a", "a"), ("b", "b"), ("c", "c"), ("a", "a")]
    assert q.pop() is None and len(q) == 0


def test_a_key_at_its_share_waits_until_one_of_its_messages_is_done() -> None:
    q: FairQueue[int] = FairQueue(per_key=2)
    for i in range(5):
        q.push("a", i)
    assert [q.pop(), q.pop(), q.pop()] == [("a", 0), ("a", 1), None]
    assert q.running("a") == 2
    q.done("a")
    assert q.pop() == ("a", 2)
    assert len(q) == 2
    assert q.take_all() == [("a", 3), ("a", 4)]  # a drain takes what waits whatever the share


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.booleans()), max_size=200), st.integers(1, 4))
def test_nothing_is_lost_or_doubled_and_no_share_is_exceeded(ops: list[tuple[str, bool]], share: int) -> None:
    q: FairQueue[int] = FairQueue(per_key=share)
    pushed: list[int] = []
    started: list[int] = []
    running: list[str] = []
    for n, (key, start) in enumerate(ops):
        q.push(key, n)
        pushed.append(n)
        if start:
            picked = q.pop()
            if picked is not None:
                started.append(picked[1])
                running.append(picked[0])
            elif running:
                q.done(running.pop(0))
        for k in "abcd":
            assert q.running(k) <= share
    while True:
        while (picked := q.pop()) is not None:
            started.append(picked[1])
            running.append(picked[0])
        if not running:
            break
        q.done(running.pop())
    assert len(q) == 0
    assert sorted(started) == pushed


def test_a_message_starts_at_once_only_when_nothing_waits_and_its_key_has_room() -> None:
    q: FairQueue[int] = FairQueue(per_key=1)
    assert q.start_now("a") is True
    assert q.start_now("a") is False  # at its share
    q.push("b", 1)
    assert q.start_now("c") is False  # another key waits: it goes first
    assert q.pop() == ("b", 1)
    q.done("a")
    assert q.start_now("a") is True
