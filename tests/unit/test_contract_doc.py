"""The contract's copy in docs/ and the code stay in step: every closed value, subject, field
and metric the code knows is written in the document."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import msgspec
import pytest
from prometheus_client import REGISTRY

import shared.platform.metrics  # noqa: F401 - registers the metrics
from shared import contract as contracts
from shared.contract import limits, subjects, types

DOC = (Path(__file__).resolve().parents[2] / "docs" / "contract-v1.md").read_text()
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


# Limits (section 9.8) ------------------------------------------------------------------------

INBOUND: list[type[msgspec.Struct]] = [
    contracts.ResumeFailed,
    contracts.TurnCompleted,
    contracts.RunsStatsRequest,
    contracts.ArchiveWork,
    contracts.ReconcileWork,
    contracts.ArchiveResult,
    contracts.CommitRequest,
    contracts.DecideRequest,
    contracts.RejectRequest,
    contracts.GetRequest,
    contracts.ListRequest,
    contracts.RunRequest,
    contracts.ResolveRequest,
    contracts.RetryRequest,
    contracts.RunsListRequest,
]
"""Every Struct decoded from what a runner, an operator or a work stream sends."""


def _limits_table() -> dict[str, set[int]]:
    """Each name in the first cell of a Limits row (`a.b` also as `b`) → the row's value."""
    section = DOC.split("### 9.8 Limits", 1)[1].split("\n### ", 1)[0]
    table: dict[str, set[int]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not (value := re.match(r"\d+", cells[1])):
            continue
        names = re.findall(r"`([^`]+)`", cells[0]) or [cells[0]]
        for name in names:
            for key in (name, name.rsplit(".", 1)[-1]):
                table.setdefault(key, set()).add(int(value.group()))
    return table


LIMITS = _limits_table()


def _bounded_fields(
    struct: type[msgspec.Struct],
) -> list[tuple[str, msgspec.inspect.Type]]:
    """(field path, scalar type) of every scalar field, nested Structs included."""
    found: list[tuple[str, msgspec.inspect.Type]] = []

    def walk(info: msgspec.inspect.Type, path: str) -> None:
        if isinstance(info, msgspec.inspect.StructType):
            for f in info.fields:
                walk(f.type, f"{path}.{f.encode_name}" if path else f.encode_name)
        elif isinstance(info, msgspec.inspect.UnionType):
            for t in info.types:
                walk(t, path)
        elif isinstance(info, msgspec.inspect.DictType):
            # A map is bounded by its entries (the table's row of its name) and its keys and
            # values by their own types.
            name = path.rsplit(".", 1)[-1]
            assert info.max_length is not None and info.max_length in LIMITS.get(name, set()), path
            walk(info.key_type, f"{path}.<key>")
            walk(info.value_type, f"{path}.<value>")
        elif not isinstance(info, msgspec.inspect.NoneType):
            found.append((path, info))

    walk(msgspec.inspect.type_info(struct), "")
    return found


@pytest.mark.parametrize("label", sorted(limits.MESSAGE_LIMITS))
def test_every_message_limit_is_in_the_document(label: str) -> None:
    assert LIMITS.get(label) == {limits.MESSAGE_LIMITS[label]}, label


@pytest.mark.parametrize("struct", INBOUND, ids=lambda s: s.__name__)
def test_every_inbound_field_is_bounded_as_the_document_says(struct: type[msgspec.Struct]) -> None:
    for path, info in _bounded_fields(struct):
        name = path.rsplit(".", 1)[-1]
        if isinstance(info, msgspec.inspect.StrType):
            if info.pattern is not None:
                # Anchored, with only bounded repetition (TOKEN's {1,128}, a time's fixed form).
                bounded = info.pattern.startswith("^") and info.pattern.endswith("\\Z")
                assert bounded and not re.search(r"(?<!\\)[*+]|\{\d+,\}", info.pattern), path
                continue
            assert info.max_length is not None, f"{struct.__name__}.{path} has no length limit"
            assert info.max_length in LIMITS.get(name, set()), f"{path}: {info.max_length} not in the table"
        elif isinstance(info, msgspec.inspect.IntType):
            assert info.le is not None, f"{struct.__name__}.{path} has no upper bound"
            assert info.le in LIMITS.get(name, set()), f"{path}: {info.le} not in the Limits table"
        else:
            assert isinstance(
                info, msgspec.inspect.LiteralType | msgspec.inspect.BoolType | msgspec.inspect.FloatType
            ), f"{struct.__name__}.{path}: {info} is unbounded"
