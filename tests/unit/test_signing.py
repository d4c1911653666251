"""Command-result signatures (contract 4.2)."""

from __future__ import annotations

import hashlib
import hmac

from shared.contract import CommandResult
from shared.contract.signing import Verdict, sign, verify

KEYS = {"k1": b"a" * 32, "k2": b"b" * 32}


def result(**kw: object) -> CommandResult:
    base: dict[str, object] = dict(
        command="run.attach",
        status="refused",
        classification="provider_attach_refused",
        issued_at="2026-11-30T12:00:00.123Z",
        key_id="k1",
        signature="",
    )
    base.update(kw)
    return CommandResult(**base)  # type: ignore[arg-type]


def test_signature_is_hmac_of_the_contract_lines() -> None:
    r = result()
    lines = "\n".join(
        [
            "continuity.command_result.v1",
            "runner-1",
            "run-1",
            "2",
            "run.attach",
            "refused",
            "provider_attach_refused",
            "2026-11-30T12:00:00.123Z",
        ]
    )
    assert (
        sign(KEYS["k1"], "runner-1", "run-1", 2, r)
        == hmac.new(KEYS["k1"], lines.encode(), hashlib.sha256).hexdigest()
    )


def test_null_classification_signs_as_empty() -> None:
    a = sign(KEYS["k1"], "r", "run", 1, result(classification=None))
    b = sign(KEYS["k1"], "r", "run", 1, result(classification=""))
    assert a == b


def test_valid_under_any_live_key() -> None:
    for key_id in KEYS:
        r = result(key_id=key_id)
        r.signature = sign(KEYS[key_id], "r", "run", 1, r)
        assert verify(KEYS, "r", "run", 1, r) is Verdict.VALID


def test_unknown_key_and_wrong_signature() -> None:
    r = result(key_id="k9")
    assert verify(KEYS, "r", "run", 1, r) is Verdict.UNKNOWN_KEY
    r = result()
    r.signature = sign(KEYS["k1"], "r", "run", 1, r)
    # Any signed field changed: another runner, run, attempt, or classification.
    assert verify(KEYS, "other", "run", 1, r) is Verdict.SIGNATURE_INVALID
    assert verify(KEYS, "r", "run", 2, r) is Verdict.SIGNATURE_INVALID
    forged = result(classification="unclassified", signature=r.signature)
    assert verify(KEYS, "r", "run", 1, forged) is Verdict.SIGNATURE_INVALID
    assert verify(KEYS, "r", "run", 1, result(signature="zz\u00e9")) is Verdict.SIGNATURE_INVALID
