"""`continuity watch`'s line for people names the row that decided, or `-` for none."""

from __future__ import annotations

from continuity.cli.watch import header, line
from shared.contract import Decision, SessionRef


def decision(rule: str | None) -> Decision:
    return Decision(
        decision_id="run-1:1:operator",
        runner_id="r-1",
        run_id="run-1",
        attempt=1,
        session=SessionRef(tenant="acme", conversation_id="c", agent_id="a"),
        action="operator",
        reason="native_event_replay_conflict",
        decided_at="2026-12-01T00:00:00.000Z",
        rule=rule,
    )


def test_the_row_is_the_last_column() -> None:
    assert header().split()[-1] == "ROW"
    assert line(decision("4.4.4")).split()[-1] == "4.4.4"
    assert line(decision(None)).split()[-1] == "-"
