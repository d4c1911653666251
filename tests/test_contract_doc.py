"""The contract's copy in docs/ and the code stay in step: every closed value, subject, field
and metric the code knows is written in the document."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import msgspec
import pytest
from prometheus_client import REGISTRY

import shared.metrics  # noqa: F401 - registers the metrics
from shared import contracts, subjects
from shared.contracts import types

DOC = (Path(__file__).resolve().parents[1] / "docs" / "contract-v1.md").read_text()
WORDS = set(re.findall(r"[A-Za-z0-9_.$<>:-]+", DOC))

CLOSED_SETS = [name for name in dir(types) if typing.get_origin(getattr(types, name)) is typing.Literal]


@pytest.mark.parametrize("name", CLOSED_SETS)
def test_every_closed_value_is_in_the_document(name: str) -> None:
    missing = [v for v in typing.get_args(getattr(types, name)) if v not in WORDS]
    assert not missing, f"{name}: {missing} not in docs/contract-v1.md"


def test_every_subject_is_in_the_document() -> None:
    values = [v for k, v in vars(subjects).items() if k.isupper() and isinstance(v, str)]
    missing = [v for v in values if v not in DOC]
    assert not missing, missing


STRUCTS = [
    getattr(contracts, n)
    for n in contracts.__all__
    if isinstance(getattr(contracts, n), type) and issubclass(getattr(contracts, n), msgspec.Struct)
]


@pytest.mark.parametrize("struct", STRUCTS, ids=lambda s: s.__name__)
def test_every_field_is_in_the_document(struct: type[msgspec.Struct]) -> None:
    missing = [f for f in struct.__struct_fields__ if f not in WORDS]
    assert not missing, f"{struct.__name__}: {missing}"


def test_every_metric_is_in_the_document() -> None:
    names = {m.name for m in REGISTRY.collect() if m.name.startswith("continuity_")}
    # prometheus_client drops the _total suffix of counters in the family name.
    missing = [n for n in names if n not in DOC and f"{n}_total" not in DOC]
    assert not missing, missing
