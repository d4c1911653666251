"""A linearizability checker for the session-store's operations, one session at a time.

A history is what clients saw: each operation (commit, reject, get, decide) with the time it
was invoked, the time its answer came back and the answer, or no answer at all (a timeout, an
`unavailable`): such an operation may or may not have taken effect. The history is
linearizable when every operation can be placed at one instant between its invocation and its
answer so that, in that order, a sequential session record gives every answer that was seen.

The sequential record is the register the session-store's scripts implement
(`shared/records/scripts/session_commit.lua`, `session_reject.lua`): a handle, a revision
that every write raises by one, an epoch that fences commits, and a state. A commit with an
`expected_revision` other than the stored one is refused `revision_conflict`, one with an epoch
below the stored one `stale_epoch`, one of the held handle `session_held`; otherwise it stores
its handle, active, at revision + 1, keeping the epoch. A reject of the stored handle of an
active or rejected record marks it rejected at revision + 1; otherwise it clears nothing.

The search is Wing and Gong's, with Lowe's memoisation of (operations placed, state): an
operation whose answer was not seen never has to be placed, and may be placed anywhere after
its invocation. Operators can run it over histories they record (`check_history`); the partition
suite (tests/chaos/) runs it over the histories of its runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

State = Literal["active", "rejected", "held", "archived"]


@dataclass(frozen=True, slots=True)
class Record:
    """The session record as the model keeps it: what any answer can show of it."""

    handle: str
    revision: int
    epoch: int
    state: State = "active"


# Calls ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Commit:
    handle: str
    expected_revision: int | None = None
    epoch: int | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    handle: str


@dataclass(frozen=True, slots=True)
class Get:
    pass


@dataclass(frozen=True, slots=True)
class Decide:
    pass


Call = Commit | Reject | Get | Decide

# Answers ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Committed:
    revision: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Refused:
    """A commit refused with a conflict code: nothing was written."""

    code: str


@dataclass(frozen=True, slots=True)
class Rejected:
    cleared: bool


@dataclass(frozen=True, slots=True)
class Seen:
    """A get's view of the record; `record` None for `not_found`."""

    record: Record | None


@dataclass(frozen=True, slots=True)
class Decided:
    """A decide's answer: `resume` (the handle it resumes) or `fresh`, with the revision and
    epoch it carries (None without a record). Why a fresh session was chosen depends on fields
    the model does not keep (model, cwd, cursors), so only what the record fixes is checked."""

    mode: Literal["resume", "fresh"]
    handle: str | None
    revision: int | None
    epoch: int | None


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "unknown"


UNKNOWN: Final = _Unknown()
"""No answer was seen: the operation may or may not have taken effect."""

Answer = Committed | Refused | Rejected | Seen | Decided | _Unknown


@dataclass(frozen=True, slots=True)
class Op:
    call: Call
    answer: Answer
    invoked: float
    completed: float = math.inf
    """When the answer came back; infinity for an unknown outcome."""
    client: str = ""
    """Who issued it, for the report only."""

    def __post_init__(self) -> None:
        if self.answer is UNKNOWN:
            object.__setattr__(self, "completed", math.inf)
        elif self.completed < self.invoked:
            raise ValueError(f"{self}: completed before it was invoked")


# The sequential model ---------------------------------------------------------------------

IMPOSSIBLE: Final = object()
"""`step`'s answer for an operation whose answer the record could not have given."""


def apply(record: Record | None, call: Call) -> tuple[Answer, Record | None]:
    """The model's answer to `call` on `record`, and the record after it. A decide answers
    `resume` for an active record here; `step` also accepts the `fresh` answers that fields
    outside the model (model, cwd, cursors) give."""
    revision = record.revision if record else 0
    epoch = record.epoch if record else 0
    if isinstance(call, Commit):
        if call.expected_revision is not None and call.expected_revision != revision:
            return Refused("revision_conflict"), record
        if call.epoch is not None and call.epoch < epoch:
            return Refused("stale_epoch"), record
        if record is not None and record.state == "held" and record.handle == call.handle:
            return Refused("session_held"), record
        return Committed(revision + 1, epoch), Record(call.handle, revision + 1, epoch, "active")
    if isinstance(call, Reject):
        if record is None or record.handle != call.handle or record.state in ("held", "archived"):
            return Rejected(False), record
        return Rejected(True), Record(record.handle, revision + 1, epoch, "rejected")
    if isinstance(call, Get):
        return Seen(record), record
    if record is None:
        return Decided("fresh", None, None, None), record
    if record.state == "active":
        return Decided("resume", record.handle, revision, epoch), record
    return Decided("fresh", None, revision, epoch), record


def step(record: Record | None, call: Call, answer: Answer) -> Record | object | None:
    """The record after `call` applied to `record`, when the model could answer `answer` (any
    answer matches UNKNOWN); `IMPOSSIBLE` when it could not."""
    if isinstance(call, Decide):
        return record if answer is UNKNOWN or _decide_matches(record, answer) else IMPOSSIBLE
    expected, after = apply(record, call)
    return after if answer is UNKNOWN or answer == expected else IMPOSSIBLE


def _decide_matches(record: Record | None, answer: Answer) -> bool:
    if not isinstance(answer, Decided):
        return False
    if record is None:
        return answer.mode == "fresh" and answer.revision is None and answer.epoch is None
    if (answer.revision, answer.epoch) != (record.revision, record.epoch):
        return False
    if answer.mode == "resume":
        return record.state == "active" and answer.handle == record.handle
    return answer.handle is None


# The search -------------------------------------------------------------------------------


@dataclass
class Verdict:
    linearizable: bool | None
    """None: the search gave up at its budget."""
    ops: int
    explored: int
    """(placed operations, state) pairs the search visited."""
    detail: str = ""
    """For a history that is not linearizable: the operation no order could place."""


@dataclass
class _Entry:
    op: int
    is_call: bool
    time: float
    prev: _Entry | None = None
    next: _Entry | None = None
    match: _Entry | None = field(default=None, repr=False)


def check(ops: list[Op], initial: Record | None = None, *, budget: int = 2_000_000) -> Verdict:
    """Whether `ops`, the operations of one session, are linearizable from `initial`."""
    # A read whose answer was never seen fits any place with any answer and changes nothing:
    # dropping it leaves the verdict as it was and keeps a partition's timeouts from
    # multiplying the orders the search must try.
    ops = [op for op in ops if not (op.answer is UNKNOWN and isinstance(op.call, Get | Decide))]
    head = _entries(ops)
    remaining = sum(1 for op in ops if op.completed != math.inf)
    placed = 0
    state: Record | None = initial
    seen: set[tuple[int, Record | None]] = set()
    stack: list[tuple[_Entry, Record | None]] = []
    stuck_at: _Entry | None = None
    stuck_state: Record | None = initial
    deepest = -1
    entry: _Entry | None = head.next
    while remaining > 0:
        if entry is None:  # only unanswered calls are left after the last answer: unreachable
            break
        op = ops[entry.op]
        if entry.is_call:
            after = step(state, op.call, op.answer)
            # An unanswered call placed where it changes nothing is the same order as leaving it
            # out (it need never be placed): only the places where it takes effect are tried.
            if after is not IMPOSSIBLE and not (op.answer is UNKNOWN and after == state):
                assert after is None or isinstance(after, Record)
                key = (placed | (1 << entry.op), after)
                if key not in seen:
                    if len(seen) >= budget:
                        return Verdict(None, len(ops), len(seen), "the search budget ran out")
                    seen.add(key)
                    stack.append((entry, state))
                    state, placed = after, key[0]
                    _lift(entry)
                    if entry.match is not None:
                        remaining -= 1
                    entry = head.next
                    continue
            entry = entry.next
            continue
        # An answer whose call no order placed before it: undo the last placement.
        if len(stack) > deepest:
            deepest, stuck_at, stuck_state = len(stack), entry, state
        if not stack:
            return Verdict(False, len(ops), len(seen), _explain(ops, stuck_at, stuck_state))
        undone, state = stack.pop()
        placed &= ~(1 << undone.op)
        _unlift(undone)
        if undone.match is not None:
            remaining += 1
        entry = undone.next
    return Verdict(True, len(ops), len(seen))


def _entries(ops: list[Op]) -> _Entry:
    """The head of a list of the operations' calls and answers in time order, each answer
    matched with its call (an unanswered call has no answer)."""
    # Calls at one instant go before answers at the same instant: the more permissive order.
    events = sorted(
        [(op.invoked, 0, i) for i, op in enumerate(ops)]
        + [(op.completed, 1, i) for i, op in enumerate(ops) if op.completed != math.inf],
        key=lambda e: (e[0], e[1]),
    )
    head = _Entry(-1, True, -math.inf)
    last: _Entry = head
    calls: dict[int, _Entry] = {}
    for time, kind, i in events:
        made = _Entry(i, kind == 0, time, prev=last)
        last.next = made
        last = made
        if kind == 0:
            calls[i] = made
        else:
            calls[i].match = made
            made.match = calls[i]
    return head


def _lift(entry: _Entry) -> None:
    for e in (entry, entry.match):
        if e is None:
            continue
        assert e.prev is not None
        e.prev.next = e.next
        if e.next is not None:
            e.next.prev = e.prev


def _unlift(entry: _Entry) -> None:
    for e in (entry.match, entry):
        if e is None:
            continue
        assert e.prev is not None
        e.prev.next = e
        if e.next is not None:
            e.next.prev = e


def _explain(ops: list[Op], stuck: _Entry | None, state: Record | None) -> str:
    if stuck is None:
        return "no operation could be placed"
    op = ops[stuck.op]
    return (
        f"no order places {type(op.call).__name__} {op.call} answered {op.answer} "
        f"(invoked {op.invoked:.3f}, answered {op.completed:.3f}, client {op.client or '-'}) "
        f"before its answer; the deepest order reached left the record at {state}"
    )


def check_history(
    history: Mapping[str, Iterable[Op]], initial: Mapping[str, Record | None] | None = None
) -> dict[str, Verdict]:
    """Each session's verdict; `history` maps a session key to its operations."""
    starts = initial or {}
    return {key: check(list(ops), starts.get(key)) for key, ops in history.items()}
