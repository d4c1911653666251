"""Messages for people: what an error reply means for the command that got it, and which
service should have answered a request nobody answered."""

from __future__ import annotations

from shared.contract import errors

# Named by docs/operator.md beside `unavailable` but not a catalogue code: explained here.
DRAINING = "draining"
_DRAINING_EXPLANATION = "the service is shutting down; retry in a moment"


def service_for(subject: str | None) -> str:
    """The service whose spec declares an endpoint on `subject`: the one to name when nobody
    answers."""
    from services import registry  # the specs are read only when a message needs them

    found = registry.service_answering(subject) if subject is not None else None
    return found or "Continuity"


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
