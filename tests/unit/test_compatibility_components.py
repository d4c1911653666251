"""Compatibility components (contract 9.11): each value's canonical JSON and digest and the
generation, in the Python SDK (`continuity_runner.harness.compatibility`) and in the services
(`shared.contract.components`), held against sdk/compatibility-vectors.json, which the
TypeScript SDK asserts too, and against digests written out here by hand."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, get_args

import pytest
from continuity_runner import types as sdk_types
from continuity_runner.harness import compatibility as sdk
from continuity_runner.harness.compatibility import Components

from shared.contract import components as server
from shared.contract import types as server_types

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "sdk" / "compatibility-vectors.json").read_text())
CASES: list[dict[str, Any]] = VECTORS["cases"]
BY_ID = {case["id"]: case for case in CASES}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_names_are_one_closed_set_everywhere() -> None:
    names = get_args(server_types.ComponentName)
    assert list(names) == sorted(names) == VECTORS["names"]
    assert get_args(sdk_types.ComponentName) == names == sdk.COMPONENT_NAMES == server.COMPONENT_NAMES


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_every_vector_is_computed_as_written(case: dict[str, Any]) -> None:
    made = Components.from_mapping(case["components"])
    assert made.canonical() == case["canonical"]
    assert made.digests() == case["digests"]
    assert made.generation == case["generation"]
    # The digests are the SHA-256 of the canonical JSON, and the services' generation of the
    # digests is the SDK's.
    assert {n: sha(text) for n, text in case["canonical"].items()} == case["digests"]
    assert server.generation_of(case["digests"]) == case["generation"]
    assert list(made.digests()) == sorted(case["digests"])
    if "same_generation_as" in case:
        assert case["generation"] == BY_ID[case["same_generation_as"]]["generation"]


def test_the_vectors_cover_what_implementations_get_wrong() -> None:
    values = json.dumps([c["components"] for c in CASES], ensure_ascii=False)
    assert any(ord(ch) > 0xFFFF for ch in values), "an astral character"
    assert any(0x7F < ord(ch) <= 0xFFFF for ch in values), "a BMP character"
    for case_id in ("empty-set", "empty-string", "set-order-same", "cwd-canonical-same", "nfd-differs"):
        assert case_id in BY_ID
    # Code point order, not UTF-16 order: U+FFFF sorts before U+1F600.
    assert json.loads(BY_ID["set-code-point-order"]["canonical"]["plugins"])[-2:] == ["\uffff", "\U0001f600"]
    # Every name appears in some case, and in the changed pairs too.
    assert set().union(*(c["components"] for c in CASES)) == set(VECTORS["names"])
    assert VECTORS["refused"] and VECTORS["changed"] and VECTORS["executable"]


def test_a_digest_written_out_by_hand() -> None:
    """Not only what the module computes: the algorithm's text, by hand."""
    route = sha('"anthropic/claude-sonnet-4"')
    assert Components(model_route="anthropic/claude-sonnet-4").digests() == {"model_route": route}
    servers = sha('["github","linear"]')
    both = Components(mcp_servers=["linear", "github"], model_route="anthropic/claude-sonnet-4")
    assert both.generation == sha(f"mcp_servers={servers}\nmodel_route={route}")
    assert Components(cwd="/w/./a//b/").canonical() == {"cwd": '"/w/a/b"'}
    assert Components(composition='a"\\\n\x01é').canonical() == {"composition": '"a\\"\\\\\\n\\u0001é"'}


def test_missing_and_empty_are_different_generations() -> None:
    base = {"model_route": "m"}
    assert Components.from_mapping({**base, "mcp_servers": []}).generation != Components(**base).generation
    assert (
        Components.from_mapping({**base, "reasoning_effort": ""}).generation != Components(**base).generation
    )
    assert Components(**base, mcp_servers=None).generation == Components(**base).generation
    assert Components(mcp_servers=[]).names() == ("mcp_servers",)


@pytest.mark.parametrize("case", VECTORS["refused"], ids=lambda c: c["id"])
def test_what_is_refused(case: dict[str, Any]) -> None:
    kind = {"type": TypeError, "value": ValueError}[case["error"]]
    with pytest.raises(kind):
        _ = Components.from_mapping(case["components"]).generation


@pytest.mark.parametrize("case", VECTORS["changed"], ids=lambda c: c["id"])
def test_the_changed_components_are_named(case: dict[str, Any]) -> None:
    saved, ready = Components.from_mapping(case["saved"]), Components.from_mapping(case["ready"])
    assert ready.changed_from(saved) == case["changed"]
    assert server.changed(saved.digests(), ready.digests()) == case["changed"]
    assert (saved.generation == ready.generation) == (case["changed"] == [])


@pytest.mark.parametrize("case", VECTORS["executable"], ids=lambda c: f"{c['harness']}-{c['version']}")
def test_the_executable_component(case: dict[str, Any]) -> None:
    if case["executable"] is None:
        with pytest.raises(ValueError):
            sdk.executable(case["harness"], case["version"])
    else:
        assert sdk.executable(case["harness"], case["version"]) == case["executable"]


def test_a_set_is_canonical_however_it_is_given() -> None:
    given = Components(plugins=("b", "a", "b"), mcp_servers={"x"})
    assert given.plugins == ("a", "b") and given.mcp_servers == ("x",)
    assert given == Components(plugins=["a", "b"], mcp_servers=["x", "x"])
    assert hash(given) == hash(Components(plugins=["a", "b"], mcp_servers=["x", "x"]))


def test_a_generation_needs_known_names_and_hex_digests() -> None:
    with pytest.raises(ValueError):
        sdk.generation_of({"model": "0" * 64})
    with pytest.raises(ValueError):
        sdk.generation_of({"model_route": "0" * 63})
    with pytest.raises(ValueError):
        sdk.generation_of({"model_route": "A" * 64})
    assert sdk.generation_of({"model_route": "0" * 64}) == server.generation_of({"model_route": "0" * 64})


def test_the_generation_is_a_token_of_the_contract() -> None:
    import msgspec

    generation = Components.from_mapping(BY_ID["full"]["components"]).generation
    msgspec.convert(generation, server_types.Token)
    assert len(generation) == 64
