"""The remote archive command the archiver sends to a runner (contract section 5).

A runner receives and answers it, so both have one home, the runner SDK's
`continuity_runner.contract` (docs/architecture.md, "One home for the contract"), where the
command is named for what the runner gets: `ArchiveRequest`."""

from __future__ import annotations

from continuity_runner.contract import ArchiveRequest as ArchiveCommand
from continuity_runner.contract import ArchiveResult

__all__ = ["ArchiveCommand", "ArchiveResult"]
