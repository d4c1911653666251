"""HMAC authentication of a runner's command result (contract section 4.2).

The signed lines have one home, the runner SDK's `continuity_runner.signing`: what runners sign
and what the services verify cannot drift apart."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from enum import Enum

from continuity_runner.signing import DOMAIN, signing_input
from continuity_runner.signing import signature as _signature

from shared.contract.events import CommandResult

__all__ = ["DOMAIN", "Verdict", "sign", "signing_input", "verify"]


class Verdict(Enum):
    VALID = "valid"
    UNKNOWN_KEY = "unknown_key"
    SIGNATURE_INVALID = "signature_invalid"


def sign(key: bytes, runner_id: str, run_id: str, attempt: int, result: CommandResult) -> str:
    """The lowercase hex signature a runner sends (used by runners, the simulator and tests)."""
    return _signature(key, runner_id, run_id, attempt, result)


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
