"""The archiver's decisions as pure functions: no servers, a fixed clock."""

from __future__ import annotations

import msgspec

from services.archiver.step import FAILED_REASON, REPLACEMENT_REASON, MoveResult, refusal, replacement
from shared.contract import subjects
from shared.contract.decisions import ArchiveWork, Decision
from shared.contract.sessions import SessionRef
from shared.contract.times import rfc3339_from_epoch
from shared.records.decisions import ATTEMPT_BUDGET

NOW = 1_800_000_000.5
OK = MoveResult(exit_code=0, timed_out=False, detail="")
FAILED = MoveResult(exit_code=1, timed_out=False, detail="runner_continuity_break_archive_failed: exit=1")


def work(attempt: int = 1) -> ArchiveWork:
    return ArchiveWork(
        archive_id=f"run-1-{attempt}",
        runner_id="r1",
        run_id="run-1",
        attempt=attempt,
        session=SessionRef(tenant="t", conversation_id="c", agent_id="a"),
        native_session_id="ns-1",
        failure_class="unclassified",
    )


def test_a_replacement_carries_the_epoch_the_local_move_sets() -> None:
    chosen = replacement(work(), OK, 4, NOW)
    decision = chosen.decision
    assert (decision.action, decision.reason, decision.epoch) == ("open_replacement", REPLACEMENT_REASON, 5)
    assert decision.decision_id == "run-1:1:open_replacement" and decision.not_before is None
    assert replacement(work(), OK, None, NOW).decision.epoch == 1
    step = chosen.step
    assert step.slot == "1:archive" and step.hold is None
    assert msgspec.json.decode(step.slot_value, type=Decision) == decision
    [entry] = step.outbox
    assert (entry.subject, entry.msg_id) == (subjects.decisions("r1"), decision.decision_id)
    assert step.run_fields["status"] == "replacing"
    assert chosen.progress == {
        "state": "done",
        "decision_id": decision.decision_id,
        "updated_at": rfc3339_from_epoch(NOW),
        "exit_code": "0",
        "timed_out": "false",
        "detail": "",
    }


def test_a_failed_move_is_retried_after_the_backoff_while_the_budget_lasts() -> None:
    chosen = refusal(work(attempt=2), FAILED, 3, NOW, backoff_s=5.0)
    decision = chosen.decision
    assert (decision.action, decision.reason, decision.epoch) == ("retry_same_session", FAILED_REASON, 3)
    assert decision.not_before == rfc3339_from_epoch(NOW + 10.0)
    assert decision.detail == FAILED.detail
    assert chosen.step.hold is None and chosen.step.run_fields["status"] == "retrying"
    assert chosen.progress == {}


def test_a_failed_move_at_the_budget_goes_to_an_operator_with_the_session_held() -> None:
    chosen = refusal(work(attempt=ATTEMPT_BUDGET), FAILED, None, NOW, backoff_s=5.0)
    decision = chosen.decision
    assert (decision.action, decision.epoch, decision.not_before) == ("operator", None, None)
    assert chosen.step.hold == "ns-1"
    assert chosen.step.slot == f"{ATTEMPT_BUDGET}:archive"
    assert chosen.step.audit is not None and chosen.step.audit.actor == "archiver"
