"""Returning what the fair queue holds at a drain (shared/platform/bus/fair.py, `take_all`):
every waiting message once, whatever the shares, in one pass, and the shares of the messages
still being handled left as they are."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.platform.bus.fair import FairQueue


def test_every_waiting_message_is_taken_whatever_the_shares() -> None:
    q: FairQueue[str] = FairQueue(per_key=1)
    for key in "abc":
        for i in range(4):
            q.push(key, f"{key}{i}")
    started = [q.pop() for _ in range(3)]  # one of each key: every key is at its share
    assert q.pop() is None and len(q) == 9
    taken = q.take_all()
    assert sorted(item for _, item in taken) == sorted(f"{k}{i}" for k in "abc" for i in range(1, 4))
    assert len(q) == 0 and q.pop() is None
    # The handlers still running keep their shares until they are done.
    assert [q.running(k) for k in "abc"] == [1, 1, 1]
    for picked in started:
        assert picked is not None
        q.done(picked[0])
    assert [q.running(k) for k in "abc"] == [0, 0, 0]


def test_a_queue_emptied_at_a_drain_takes_and_serves_again() -> None:
    q: FairQueue[int] = FairQueue(per_key=2)
    q.push("a", 1)
    assert q.take_all() == [("a", 1)]
    assert q.take_all() == []
    q.push("b", 2)
    assert q.pop() == ("b", 2)


@given(
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.sampled_from(["push", "pop", "done"])), max_size=300),
    st.integers(1, 3),
)
def test_take_all_returns_exactly_what_waits(ops: list[tuple[str, str]], share: int) -> None:
    q: FairQueue[int] = FairQueue(per_key=share)
    waiting: set[int] = set()
    running: list[str] = []
    for n, (key, op) in enumerate(ops):
        if op == "push":
            q.push(key, n)
            waiting.add(n)
        elif op == "pop" and (picked := q.pop()) is not None:
            waiting.discard(picked[1])
            running.append(picked[0])
        elif op == "done" and running:
            q.done(running.pop(0))
    shares = {k: q.running(k) for k in "abcdefgh"}
    taken = q.take_all()
    assert len(taken) == len(waiting) == len({item for _, item in taken})
    assert {item for _, item in taken} == waiting
    assert len(q) == 0 and q.pop() is None
    assert {k: q.running(k) for k in "abcdefgh"} == shares
