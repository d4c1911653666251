"""The catalogue of error codes (shared/contract/errors.py) against the contract's error table
(docs/contract-v1.md sections 1, 3, 6 and 9.2), and the CLI's explanation of every code."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from continuity.cli.explain import explain
from shared.contract import errors
from shared.contract.decoding import InvalidInput, decode
from shared.contract.sessions import DecideRequest

DOC = (Path(__file__).resolve().parents[2] / "docs" / "contract-v1.md").read_text()


def section(start: str, end: str) -> str:
    return DOC[DOC.index(start) : DOC.index(end)]


def contract_codes() -> dict[str, int]:
    """Every `code` the contract gives a status, from the prose of 3 and 6 and the table of 9.2."""
    found: dict[str, set[int]] = {}
    prose = section("\n## 3.", "\n## 4.") + section("\n## 6.", "\n## 7.")
    pairs = [(code, int(status)) for status, code in re.findall(r"\b(\d{3})\s+`([a-z_]+)`", prose)]
    pairs += [(code, int(status)) for code, status in re.findall(r"`([a-z_]+)`\s+\((\d{3})\)", prose)]
    for row in re.findall(r"^\| (\d{3}) \| ([^|]+) \|", section("### 9.2", "### 9.3"), re.M):
        pairs += [(code, int(row[0])) for code in re.findall(r"`([a-z_]+)`", row[1])]
    for code, status in pairs:
        found.setdefault(code, set()).add(status)
    assert all(len(statuses) == 1 for statuses in found.values()), found
    return {code: statuses.pop() for code, statuses in found.items()}


def test_the_parser_reads_each_kind_of_place() -> None:
    codes = contract_codes()
    assert codes["revision_conflict"] == 409  # "error `revision_conflict` (409)", section 3.2
    assert codes["not_found"] == 404  # "404 `not_found`", sections 3.5 and 6
    assert codes["reconciliation_required"] == 409  # section 6
    assert codes["run_changed"] == 409 and codes["unavailable"] == 503  # table 9.2


def test_the_catalogue_is_the_contract_error_table() -> None:
    assert {code: e.status for code, e in errors.CATALOGUE.items()} == contract_codes()


def test_every_status_is_one_section_1_allows() -> None:
    allowed = re.search(r"`Nats-Service-Error-Code` \(([\d, ]+)\)", section("## 1.", "## 2."))
    assert allowed is not None
    statuses = {int(s) for s in allowed.group(1).split(", ")}
    assert {e.status for e in errors.CATALOGUE.values()} == statuses


def test_an_entry_raises_its_code_and_status_with_its_default_or_a_given_message() -> None:
    err = errors.RUN_CHANGED.error()
    assert (err.status, err.code, err.message) == (409, "run_changed", errors.RUN_CHANGED.message)
    assert errors.NOT_FOUND.error("no such run").message == "no such run"


@pytest.mark.parametrize(
    "payload",
    [b"x" * 70_000, b"{not json", b"{}", b'{"session": 3}'],
    ids=["too_large", "malformed", "missing", "invalid"],
)
def test_decoding_failures_are_catalogue_codes_of_status_400(payload: bytes) -> None:
    with pytest.raises(InvalidInput) as caught:
        decode(payload, msgspec.json.Decoder(DecideRequest))
    assert errors.CATALOGUE[caught.value.code].status == 400


@pytest.mark.parametrize("code", sorted(errors.CATALOGUE))
def test_the_cli_explains_every_code(code: str) -> None:
    fallback = "the service's own sanitized text"
    assert explain(code, "r1", fallback) not in (fallback, code)
