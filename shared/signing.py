"""HMAC authentication of a runner's command result (contract section 4.2)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from enum import Enum

from shared.contracts.events import CommandResult

DOMAIN = "continuity.command_result.v1"


class Verdict(Enum):
    VALID = "valid"
    UNKNOWN_KEY = "unknown_key"
    SIGNATURE_INVALID = "signature_invalid"


def signing_input(runner_id: str, run_id: str, attempt: int, result: CommandResult) -> bytes:
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


def sign(key: bytes, runner_id: str, run_id: str, attempt: int, result: CommandResult) -> str:
    """The lowercase hex signature a runner sends (used by runners, the simulator and tests)."""
    return hmac.new(key, signing_input(runner_id, run_id, attempt, result), hashlib.sha256).hexdigest()


def verify(
    keys: Mapping[str, bytes], runner_id: str, run_id: str, attempt: int, result: CommandResult
) -> Verdict:
    key = keys.get(result.key_id)
    if key is None:
        return Verdict.UNKNOWN_KEY
    expected = sign(key, runner_id, run_id, attempt, result)
    # Compare as bytes of a fixed alphabet: a non-hex or wrong-length signature simply fails.
    if hmac.compare_digest(expected.encode(), result.signature.lower().encode("utf-8", "replace")):
        return Verdict.VALID
    return Verdict.SIGNATURE_INVALID
