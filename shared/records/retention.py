"""How long records are kept (docs/contract-v1.md, section 9.9).

Every record of a run gets a time to live in the same script that writes it, refreshed by every
later step, so no key is ever without one; while the run waits on a person (stopped for an
operator, or with an open reconciliation) its records are kept without one (PERSIST), and the
next step gives it back. Archive copies of session records have their own retention. Session
records themselves never expire: a held one is evidence for an operator, an active one is what
the next turn resumes.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.contract.types import RunStatus
from shared.platform.config import Config

DAY_MS = 86_400_000

WAITING_STATUSES: frozenset[RunStatus] = frozenset({"operator", "reconciling"})
"""Run statuses that wait on a person: their records are kept until the next step."""


@dataclass(frozen=True, slots=True)
class Retention:
    run_ms: int
    """A finished run's records, from its last step."""
    archive_ms: int
    """An archive copy of a session record, from when it was made."""

    @classmethod
    def from_config(cls, config: Config) -> Retention:
        return cls(
            run_ms=max(1, round(config.retention_days * DAY_MS)),
            archive_ms=max(1, round(config.archive_retention_days * DAY_MS)),
        )

    @classmethod
    def of_seconds(cls, run_s: float, archive_s: float | None = None) -> Retention:
        return cls(run_ms=max(1, round(run_s * 1000)), archive_ms=max(1, round((archive_s or run_s) * 1000)))

    @property
    def run_s(self) -> float:
        return self.run_ms / 1000


def waits(status: str) -> bool:
    """Whether a run in `status` waits on a person, so that its records are kept."""
    return status in WAITING_STATUSES


DEFAULT = Retention.from_config(Config())
"""The defaults of `Config` (30 days, archives 90)."""
