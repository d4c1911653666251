"""The session-store's answers as pure functions of the stored record (no I/O): the resume
decision, by the rules of `rules` (contract 3.3), and the view of a record (3.4). Reading and
writing the record are `store`'s; who may ask is `requests`'."""

from __future__ import annotations

from shared.contract.sessions import SessionView
from shared.records.session import StoredSession

from . import rules

decide = rules.decide
"""Resume or start fresh: the first rule that matches (`stored` None: no record, or one the
runner may not see). The table's own function: a decision is the hot path, so no extra call."""


def view(stored: StoredSession) -> SessionView:
    """What a `get` shows of a record: never its generation value, only whether it has one."""
    v1 = stored.v1
    return SessionView(
        native_session_id=v1["native_session_id"],
        adapter=v1["adapter"],
        model=v1["model"],
        cwd=v1["cwd"],
        cursor=v1["cursor"],
        checkpoint_policy=v1["checkpoint_policy"],
        state=stored.state,  # type: ignore[arg-type]
        revision=stored.revision,
        epoch=stored.epoch,
        updated_at=v1["updated_at"],
        has_generation=stored.has_generation,
        generation_trusted=stored.generation_trusted,
        owner=stored.owner or None,
    )
