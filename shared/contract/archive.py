"""The remote archive command the archiver sends to a runner (contract section 5)."""

from __future__ import annotations

import msgspec

from shared.contract.sessions import SessionRef
from shared.contract.types import ExitCode, Output, Token


class ArchiveCommand(msgspec.Struct, kw_only=True):
    archive_id: Token
    run_id: Token
    session: SessionRef
    native_session_id: Token


class ArchiveResult(msgspec.Struct, kw_only=True):
    exit_code: ExitCode | None
    timed_out: bool = False
    output: Output = ""
