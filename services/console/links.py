"""The console's addresses of its pages, for the pages' links and redirects and for the templates."""

from __future__ import annotations

from urllib.parse import urlencode

from shared.contract import SessionRef


def link(page: str, run_id: str, **query: str) -> str:
    """The console's address of a run's `page` (`run`, `run/retry`, `reconciliation`,
    `reconciliation/resolve`). The run id travels in the query: `.` and `..` are valid run ids,
    and as path segments a browser would resolve them away (`/runs/..` is `/`)."""
    return f"/{page}?{urlencode({'id': run_id, **query})}"


def session_link(session: SessionRef, page: str = "session", **query: str) -> str:
    """The console's address of a session's `page` (`session`, `session/transfer`). Its three
    ids travel in the query, like a run's: `.` and `..` are tokens too."""
    ids = {"tenant": session.tenant, "conversation_id": session.conversation_id, "agent_id": session.agent_id}
    return f"/{page}?{urlencode({**ids, **query})}"
