"""Messages for people: what an error reply means for the command that got it, and which
service should have answered a request nobody answered."""

from __future__ import annotations

from shared.contract import errors

# The service behind each request subject: the one to name when nobody answers.
SERVICE_BY_SUBJECT: dict[str, str] = {
    "continuity.sessions.": "session-store",
    "continuity.runners.": "session-store",
    "continuity.reconciliations.": "reconciliation",
    "continuity.runs.": "reconciliation",
    "continuity.operator.": "reconciliation",
}

# Named by docs/operator.md beside `unavailable` but not a catalogue code: explained here.
DRAINING = "draining"
_DRAINING_EXPLANATION = "the service is shutting down; retry in a moment"


def service_for(subject: str | None) -> str:
    for prefix, service in SERVICE_BY_SUBJECT.items():
        if subject is not None and subject.startswith(prefix):
            return service
    return "Continuity"


def explain(code: str, run_id: str | None, fallback: str, missing: str | None = None) -> str:
    """The catalogue's explanation of `code` (shared/contract/errors.py); `fallback` is the
    reply's own text, shown for a code the catalogue does not have. `missing`: what a
    `not_found` is about (default: the run)."""
    entry = errors.CATALOGUE.get(code)
    if entry is not None:
        return entry.explain(run_id, fallback, missing)
    if code == DRAINING:
        return _DRAINING_EXPLANATION
    return fallback or code
