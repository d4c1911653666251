"""The history checker (continuity/tools/linearizability.py) on histories written by hand: the
sequential model of the session record, linearizable histories that pass, and stale reads,
lost commits and reverted revisions that fail."""

from __future__ import annotations

import random
import time

from continuity.tools.linearizability import (
    IMPOSSIBLE,
    UNKNOWN,
    Commit,
    Committed,
    Decide,
    Decided,
    Get,
    Op,
    Record,
    Refused,
    Reject,
    Rejected,
    Seen,
    apply,
    check,
    check_history,
    step,
)


def seen(handle: str, revision: int, state: str = "active", epoch: int = 0) -> Seen:
    return Seen(Record(handle, revision, epoch, state))  # type: ignore[arg-type]


def test_the_model_follows_the_commit_and_reject_scripts() -> None:
    r = step(None, Commit("h1"), UNKNOWN)
    assert r == Record("h1", 1, 0)
    assert step(r, Commit("h2", expected_revision=0), Refused("revision_conflict")) == r  # type: ignore[arg-type]
    assert step(r, Commit("h2", expected_revision=1), Committed(2, 0)) == Record("h2", 2, 0)  # type: ignore[arg-type]
    fenced = Record("h1", 4, 2)
    assert step(fenced, Commit("h2", epoch=1), Refused("stale_epoch")) == fenced
    held = Record("h1", 4, 2, "held")
    assert step(held, Commit("h1"), Refused("session_held")) == held
    assert step(held, Commit("h9"), Committed(5, 2)) == Record("h9", 5, 2)
    assert step(r, Reject("h1"), Rejected(True)) == Record("h1", 2, 0, "rejected")  # type: ignore[arg-type]
    assert step(r, Reject("other"), Rejected(False)) == r  # type: ignore[arg-type]
    assert step(held, Reject("h1"), Rejected(False)) == held
    assert step(None, Reject("h1"), Rejected(False)) is None
    # A decide resumes only the stored handle of an active record, and carries its revision.
    assert step(r, Decide(), Decided("resume", "h1", 1, 0)) == r  # type: ignore[arg-type]
    assert step(None, Decide(), Decided("fresh", None, None, None)) is None
    assert step(held, Decide(), Decided("resume", "h1", 4, 2)) is IMPOSSIBLE
    assert step(held, Decide(), Decided("fresh", None, 4, 2)) == held


def test_a_sequential_history_passes() -> None:
    ops = [
        Op(Get(), Seen(None), 0, 1),
        Op(Commit("h1"), Committed(1, 0), 2, 3),
        Op(Decide(), Decided("resume", "h1", 1, 0), 4, 5),
        Op(Commit("h2", expected_revision=1), Committed(2, 0), 6, 7),
        Op(Commit("h3", expected_revision=1), Refused("revision_conflict"), 8, 9),
        Op(Reject("h2"), Rejected(True), 10, 11),
        Op(Get(), seen("h2", 3, "rejected"), 12, 13),
        Op(Decide(), Decided("fresh", None, 3, 0), 14, 15),
    ]
    assert check(ops).linearizable


def test_concurrent_commits_pass_in_the_order_their_answers_imply() -> None:
    # Three clients commit at once; the answers say c, then a, then b.
    ops = [
        Op(Commit("a"), Committed(2, 0), 0, 10, client="a"),
        Op(Commit("b"), Committed(3, 0), 0, 10, client="b"),
        Op(Commit("c"), Committed(1, 0), 0, 10, client="c"),
        Op(Get(), seen("a", 2), 1, 9, client="reader"),
        Op(Get(), seen("b", 3), 11, 12, client="reader"),
    ]
    assert check(ops).linearizable


def test_a_stale_read_fails() -> None:
    ops = [
        Op(Commit("h1"), Committed(1, 0), 0, 1),
        Op(Commit("h2"), Committed(2, 0), 2, 3),
        # Invoked after the second commit was answered, it shows the first.
        Op(Get(), seen("h1", 1), 4, 5),
    ]
    verdict = check(ops)
    assert verdict.linearizable is False
    assert "Get" in verdict.detail and "h1" in verdict.detail


def test_a_stale_decide_fails() -> None:
    ops = [
        Op(Commit("h1"), Committed(1, 0), 0, 1),
        Op(Reject("h1"), Rejected(True), 2, 3),
        Op(Decide(), Decided("resume", "h1", 1, 0), 4, 5),
    ]
    assert check(ops).linearizable is False


def test_a_lost_acknowledged_commit_fails() -> None:
    ops = [
        Op(Commit("h1"), Committed(1, 0), 0, 1),
        Op(Commit("h2", expected_revision=1), Committed(2, 0), 2, 3),
        Op(Get(), seen("h1", 1), 10, 11),  # after a failover: the second commit is gone
    ]
    assert check(ops).linearizable is False


def test_a_revision_that_goes_back_fails() -> None:
    ops = [
        Op(Get(), seen("h1", 5), 0, 1),
        Op(Get(), seen("h1", 4), 2, 3),
    ]
    assert check(ops, initial=Record("h1", 4, 0)).linearizable is False


def test_an_unanswered_commit_may_or_may_not_have_taken_effect() -> None:
    took = [
        Op(Commit("h1"), Committed(1, 0), 0, 1),
        Op(Commit("h2"), UNKNOWN, 2),
        Op(Get(), seen("h2", 2), 5, 6),
    ]
    assert check(took).linearizable
    did_not = [*took[:2], Op(Get(), seen("h1", 1), 5, 6)]
    assert check(did_not).linearizable
    # But once seen, its effect cannot go away again.
    vanished = [*took, Op(Get(), seen("h1", 1), 7, 8)]
    assert check(vanished).linearizable is False


def test_an_unanswered_commit_takes_effect_only_after_its_invocation() -> None:
    ops = [
        Op(Get(), seen("h2", 1), 0, 1),
        Op(Commit("h2"), UNKNOWN, 2),
    ]
    assert check(ops).linearizable is False


def test_a_refused_commit_wrote_nothing() -> None:
    ops = [
        Op(Commit("h1"), Committed(1, 0), 0, 1),
        Op(Commit("h2", expected_revision=0), Refused("revision_conflict"), 2, 3),
        Op(Get(), seen("h2", 2), 4, 5),
    ]
    assert check(ops).linearizable is False


def test_histories_are_checked_per_session() -> None:
    good = [Op(Commit("h1"), Committed(1, 0), 0, 1), Op(Get(), seen("h1", 1), 2, 3)]
    bad = [Op(Commit("h1"), Committed(1, 0), 0, 1), Op(Get(), Seen(None), 2, 3)]
    verdicts = check_history({"a": good, "b": bad})
    assert verdicts["a"].linearizable is True
    assert verdicts["b"].linearizable is False


def _simulated(seed: int, clients: int, per_client: int, unknown_rate: float) -> list[Op]:
    """Clients running against one sequential record, each operation taking effect at one
    random instant within its interval: linearizable by construction."""
    rng = random.Random(seed)
    pending: list[tuple[float, float, int, str]] = []
    for c in range(clients):
        t = 0.0
        for _ in range(per_client):
            start = t + rng.random()
            end = start + rng.random() * 3
            pending.append((start + rng.random() * (end - start), start, c, f"{c}"))
            t = end
    # The record applies calls in order of their instants.
    ops: list[Op] = []
    record: Record | None = None
    for instant, start, c, client in sorted(pending):
        revision = record.revision if record else None
        choice = rng.random()
        call: Commit | Reject | Get | Decide
        if choice < 0.4:
            call = Commit(f"h{c}-{instant:.3f}", expected_revision=revision if rng.random() < 0.5 else None)
        elif choice < 0.55:
            call = Reject(record.handle if record else "none")
        elif choice < 0.8:
            call = Get()
        else:
            call = Decide()
        answer, _ = apply(record, call)
        after = step(record, call, answer)
        assert after is None or isinstance(after, Record)
        end = instant + (instant - start)
        if rng.random() < unknown_rate:
            ops.append(Op(call, UNKNOWN, start, client=client))
        else:
            ops.append(Op(call, answer, start, end, client=client))
        record = after
    return ops


def test_long_concurrent_histories_with_unknown_outcomes_are_checked_quickly() -> None:
    for seed in range(5):
        ops = _simulated(seed, clients=4, per_client=60, unknown_rate=0.05)
        started = time.perf_counter()
        verdict = check(ops)
        assert verdict.linearizable, verdict.detail
        assert time.perf_counter() - started < 10


def test_a_simulated_history_with_one_read_made_stale_fails() -> None:
    ops = _simulated(7, clients=4, per_client=60, unknown_rate=0.0)
    # Plant: a read long after three commits were answered shows the record before them.
    answered = [op for op in ops if isinstance(op.answer, Committed)]
    before, last = answered[-4], answered[-1]
    planted = Op(
        Get(),
        Seen(Record(before.call.handle, before.answer.revision, 0)),
        last.completed + 1,
        last.completed + 2,
    )  # type: ignore[union-attr, attr-defined]
    assert check(ops).linearizable
    assert check([*ops, planted]).linearizable is False


def test_unanswered_reads_do_not_multiply_the_search() -> None:
    """A partition times out many gets and decides: such a read fits anywhere and changes
    nothing, so it is left out of the search; what was answered is still checked."""
    rng = random.Random(11)
    ops = _simulated(3, clients=4, per_client=60, unknown_rate=0.0)
    # Every client also issued reads that were never answered, spread over the whole history.
    end = max(op.completed for op in ops)
    reads = [Op(rng.choice([Get(), Decide()]), UNKNOWN, rng.random() * end, client="r") for _ in range(300)]
    verdict = check([*ops, *reads], budget=20_000)
    assert verdict.linearizable, verdict.detail
    answered = [op for op in ops if isinstance(op.answer, Committed)]
    stale = Op(Get(), Seen(None), answered[-1].completed + 1, answered[-1].completed + 2)
    assert check([*ops, *reads, stale], budget=20_000).linearizable is False


def test_unanswered_commits_are_tried_only_where_they_take_effect() -> None:
    """A partition times out commits too; one that could only have been refused where it is
    placed changes nothing, so the search does not try it there."""
    ops = _simulated(4, clients=4, per_client=60, unknown_rate=0.0)
    end = max(op.completed for op in ops)
    rng = random.Random(5)
    # Unanswered commits expecting a revision the record had long before: refused wherever they
    # fall after it, and so never taking effect.
    stale = [
        Op(Commit(f"late-{i}", expected_revision=1), UNKNOWN, end / 2 + rng.random() * end / 2, client="t")
        for i in range(40)
    ]
    verdict = check([*ops, *stale], budget=50_000)
    assert verdict.linearizable, verdict.detail
    # A history with a stale read is searched through before it is refused: still decided.
    answered = [op for op in ops if isinstance(op.answer, Committed)]
    planted = Op(Get(), Seen(None), answered[-1].completed + 1, answered[-1].completed + 2)
    assert check([*ops, *stale, planted], budget=50_000).linearizable is False
