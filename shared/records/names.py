"""The names of a run's records: decision slots, message ids and archive ids.

A slot names one decision point of a run (the classifier's `<attempt>`, the archiver's
`<attempt>:archive`, an operator's `<attempt>:continue`); a slot is written once, so a
redelivered or re-sent message finds it taken and makes no second decision. Message ids are
the `Nats-Msg-Id` of a publication, so JetStream drops a second one.
"""

from __future__ import annotations

import hashlib
from typing import Literal


def decision_id(run_id: str, attempt: int, action: str) -> str:
    """`<run_id>:<attempt>:<action>`, also the `Nats-Msg-Id` of the decision's publication."""
    return f"{run_id}:{attempt}:{action}"


def classifier_slot(attempt: int) -> str:
    return str(attempt)


def archive_slot(attempt: int) -> str:
    return f"{attempt}:archive"


def continue_slot(attempt: int) -> str:
    return f"{attempt}:continue"


def work_id(run_id: str, attempt: int, work: Literal["archive", "reconcile"]) -> str:
    """The message id of a work item on `continuity.work.<work>`."""
    return f"work:{run_id}:{attempt}:{work}"


def archive_id(run_id: str, attempt: int) -> str:
    """`<run_id>-<attempt>`, readable; a run_id too long for that to stay a TOKEN (128
    characters) gets a digest of it instead, which is just as unique and deterministic."""
    readable = f"{run_id}-{attempt}"
    if len(readable) <= 128:
        return readable
    return f"run-{hashlib.sha256(run_id.encode()).hexdigest()[:40]}-{attempt}"
