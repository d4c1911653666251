"""How runs are written for people, shared by `continuity runs` and `continuity reconciliations`."""

from __future__ import annotations

from typing import Any

from shared.contract import ReconciliationRecord, RunEntry, RunView


def session_text(run: RunView | ReconciliationRecord | RunEntry) -> str:
    s = run.session
    return f"{s.tenant}/{s.conversation_id}/{s.agent_id}"


def render_delivered(reply: Any, what: str) -> str:
    return (
        f"{what}. Delivered continue_fresh (decision {reply.decision_id}): the runner starts a "
        f"fresh provider session in the same workspace; the saved session stays held."
    )
