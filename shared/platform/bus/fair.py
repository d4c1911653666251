"""Fair service of held messages: keys (runners) taken in turn, each with a bounded share.

A consumer that holds more messages than it handles at once must choose which to start next.
Taken in arrival order, one runner's flood ahead of another's event in the stream delays that
event by the whole flood. `FairQueue` starts them by key in rotation instead: every key with a
message waiting gets the next free slot in turn, and no key has more than `per_key` messages
being handled at once, so one runner can take at most that share of the handlers.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    def __init__(self, per_key: int) -> None:
        if per_key < 1:
            raise ValueError("per_key must be at least 1")
        self._per_key = per_key
        self._waiting: OrderedDict[str, deque[T]] = OrderedDict()
        """Keys with messages waiting, in the order they are served next."""
        self._running: dict[str, int] = {}
        self._size = 0

    def __len__(self) -> int:
        """Messages waiting (not those being handled)."""
        return self._size

    def running(self, key: str) -> int:
        return self._running.get(key, 0)

    def push(self, key: str, item: T) -> None:
        queue = self._waiting.get(key)
        if queue is None:
            queue = self._waiting[key] = deque()
        queue.append(item)
        self._size += 1

    def start_now(self, key: str) -> bool:
        """With nothing waiting, start a message of `key` at once if it is within its share
        (the same outcome as `push` then `pop`, for less work); the caller calls `done(key)`."""
        if self._size or self._running.get(key, 0) >= self._per_key:
            return False
        self._running[key] = self._running.get(key, 0) + 1
        return True

    def pop(self) -> tuple[str, T] | None:
        """The next message to start, by key in rotation, skipping keys at their share; None
        when every waiting key is at its share (or nothing waits). The caller calls `done(key)`
        when the message has been handled."""
        for key in list(self._waiting):
            if self._running.get(key, 0) >= self._per_key:
                continue
            queue = self._waiting[key]
            item = queue.popleft()
            self._size -= 1
            if queue:
                self._waiting.move_to_end(key)  # its next message waits for the others' turn
            else:
                del self._waiting[key]
            self._running[key] = self._running.get(key, 0) + 1
            return key, item
        return None

    def take_all(self) -> list[tuple[str, T]]:
        """Every waiting message, whatever the shares, in one pass (for returning what is held
        at a drain); none of them counts as running, so no `done` follows. The messages being
        handled keep their shares until their own `done`."""
        taken = [(key, item) for key, queue in self._waiting.items() for item in queue]
        self._waiting.clear()
        self._size = 0
        return taken

    def done(self, key: str) -> None:
        left = self._running.get(key, 0) - 1
        if left > 0:
            self._running[key] = left
        else:
            self._running.pop(key, None)
