"""The HMAC-SHA256 signature of a command result (contract section 4.2)."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime
from typing import Protocol

from continuity_runner.contract import CommandResult

DOMAIN = "continuity.command_result.v1"


def now_rfc3339() -> str:
    """The current UTC time as the contract writes times: `2026-11-30T12:00:00.123Z`."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class SignedFields(Protocol):
    """The fields of a command result that its signature covers (any Struct that has them: the
    services verify with this same function)."""

    @property
    def command(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def classification(self) -> str | None: ...
    @property
    def issued_at(self) -> str: ...


def signing_input(runner_id: str, run_id: str, attempt: int, result: SignedFields) -> bytes:
    """The signed lines, joined by `\\n`: domain, runner, run, attempt, command, status,
    classification (empty when none) and issued_at."""
    lines = (
        DOMAIN,
        runner_id,
        run_id,
        str(attempt),
        result.command,
        result.status,
        result.classification or "",
        result.issued_at,
    )
    return "\n".join(lines).encode("utf-8")


def signature(key: bytes, runner_id: str, run_id: str, attempt: int, result: SignedFields) -> str:
    """Lowercase hex HMAC-SHA256 of `signing_input` under `key`."""
    return hmac.new(key, signing_input(runner_id, run_id, attempt, result), hashlib.sha256).hexdigest()


def sign_command_result(
    key_id: str,
    key: bytes,
    runner_id: str,
    run_id: str,
    attempt: int,
    command: str,
    status: str,
    classification: str | None = None,
    issued_at: str | None = None,
) -> CommandResult:
    """A `CommandResult` signed with `key`, issued now unless `issued_at` is given."""
    result = CommandResult(
        command=command,
        status=status,
        classification=classification,
        issued_at=now_rfc3339() if issued_at is None else issued_at,
        key_id=key_id,
        signature="",
    )
    result.signature = signature(key, runner_id, run_id, attempt, result)
    return result
