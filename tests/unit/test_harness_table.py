"""The harness table (sdk/harnesses.json) as the Python SDK reads it: its checks (every class a
harness class of the contract, rule ids unique and prefixed, every harness's rules total, ranges,
patterns and path templates well formed), the matcher's semantics case by case, version ranges
and capabilities, and the table shipped beside the package (the canonical file in a checkout)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest
from continuity_runner import harness
from continuity_runner.errors import InvalidRequest
from continuity_runner.harness import match
from continuity_runner.types import FailureClass as SdkFailureClass
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.contract.types import FailureClass

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "sdk" / "harnesses.json"
NAMES = [
    "claude-code",
    "codex",
    "codex-app-server",
    "gemini-cli",
    "opencode",
    "claude-agent-sdk",
    "openai-agents",
    "acp",
]


def raw() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(TABLE.read_text())
    return table


def validate(table: dict[str, Any]) -> harness.Table:
    return harness.validate_table(json.dumps(table))


# ---- the shipped table -------------------------------------------------------------------------


def test_the_shipped_table_is_the_canonical_file_and_holds_the_eight_harnesses_in_order() -> None:
    assert harness.shipped_path().resolve() == TABLE.resolve()  # a checkout reads the canonical file
    table = harness.shipped_table()
    assert table.format == 1 and re.fullmatch(r"\d{4}\.\d{1,2}\.\d+", table.version)
    assert harness.names() == NAMES
    assert validate(raw()) == table


def test_every_class_a_rule_names_is_a_harness_class_of_the_contract() -> None:
    # Both copies of the contract's literal list, the server's and the SDK's, have every one.
    assert set(harness.HARNESS_CLASSES) <= set(get_args(FailureClass))
    assert set(harness.HARNESS_CLASSES) <= set(get_args(SdkFailureClass))
    used = {r.failure_class for h in harness.shipped_table().harnesses for r in h.rules}
    assert used - {None} <= set(harness.HARNESS_CLASSES)
    # Each harness class is named by some rule: none is dead in the table.
    assert used - {None} == set(harness.HARNESS_CLASSES)


def test_rule_ids_are_unique_across_the_table_and_prefixed_by_their_harness() -> None:
    ids = [r.id for h in harness.shipped_table().harnesses for r in h.rules]
    assert len(ids) == len(set(ids))
    for h in harness.shipped_table().harnesses:
        for r in h.rules:
            assert r.id.startswith(f"{h.name}.") and re.fullmatch(r"[a-z0-9][a-z0-9.-]{0,63}", r.id)
            assert r.evidence and all(e.strip() for e in r.evidence), r.id


def test_every_harness_ends_with_the_two_rules_that_make_it_total() -> None:
    for h in harness.shipped_table().harnesses:
        *_, failure, success = h.rules
        assert (failure.id, failure.failure_class, failure.when) == (
            f"{h.name}.failure",
            "unclassified",
            harness.When(exit="nonzero"),
        )
        assert success.failure_class is None and success.when in (harness.When(), harness.When(exit="any"))


outcomes: st.SearchStrategy[dict[str, Any]] = st.builds(
    dict,
    exit_code=st.one_of(st.none(), st.integers(-300, 300)),
    stdout=st.one_of(
        st.text(max_size=200),
        st.sampled_from(
            [
                '{"type":"result","is_error":true}',
                '{"type":"turn.failed","error":{"message":"x"}}',
                '{"error":{"code":-32002,"message":"Resource not found"}}',
                '{"type":"result","status":"error"}',
                "[1, 2]",
            ]
        ),
    ),
    stderr=st.text(max_size=200),
    error=st.one_of(
        st.none(),
        st.builds(
            dict,
            type=st.one_of(st.none(), st.sampled_from(["ResultError", "BadRequestError", "X"])),
            code=st.one_of(st.none(), st.integers(-40000, 40000), st.text(max_size=30)),
        ),
    ),
)


@settings(max_examples=300, deadline=None)
@given(outcome=outcomes, name=st.sampled_from(NAMES))
def test_any_outcome_is_decided_by_a_rule_of_its_harness(outcome: dict[str, Any], name: str) -> None:
    adapter = harness.adapter(name)
    assessed = adapter.assess(outcome)
    rule = next(r for r in adapter.spec.rules if r.id == assessed.rule)
    assert assessed.failure_class == rule.failure_class
    if outcome["exit_code"] not in (None, 0) and assessed.failure_class is None:
        # A nonzero exit is never a success but by a rule that says why (a false-positive guard).
        assert rule.id != f"{name}.success"


def test_the_table_cannot_be_decoded_into_unknown_fields_or_kinds() -> None:
    for path, plant, where in [
        (("harnesses", 0), {"colour": "red"}, "table.harnesses[0]"),
        (("harnesses", 0, "rules", 0), {"class": "native_session_gone"}, "table.harnesses[0].rules[0].class"),
        (
            ("harnesses", 0, "rules", 0),
            {"class": "provider_attach_refused"},
            "table.harnesses[0].rules[0].class",
        ),
        (("harnesses", 0), {"kind": "daemon"}, "table.harnesses[0].kind"),
        (
            ("harnesses", 0, "rules", 0, "when"),
            {"exit": "sometimes"},
            "table.harnesses[0].rules[0].when.exit",
        ),
        (("harnesses", 0, "rules", 0, "when"), {"regex": ["a.*"]}, "table.harnesses[0].rules[0].when"),
        (("harnesses", 0, "sessions"), {"cwd_key": "gemini"}, "table.harnesses[0].sessions.cwd_key"),
    ]:
        table = raw()
        node: Any = table
        for key in path:
            node = node[key]
        node.update(plant)
        with pytest.raises(harness.InvalidTable) as refused:
            validate(table)
        assert refused.value.path.startswith(where), (plant, str(refused.value))


PLANTS: list[tuple[str, Any, str]] = [
    # (what, a change of the table, the message's part)
    (
        "a rule id used twice",
        lambda t: t["harnesses"][1]["rules"].insert(0, copy.deepcopy(t["harnesses"][1]["rules"][0])),
        "is used twice",
    ),
    (
        "a rule of another harness's prefix",
        lambda t: t["harnesses"][0]["rules"][0].update(id="codex.stolen"),
        "must start with claude-code.",
    ),
    (
        "a rule id out of pattern",
        lambda t: t["harnesses"][0]["rules"][0].update(id="claude-code.Upper"),
        "must match",
    ),
    ("no evidence", lambda t: t["harnesses"][0]["rules"][0].update(evidence=[]), "at least one"),
    (
        "the rules not total (no final success rule)",
        lambda t: t["harnesses"][2]["rules"].pop(),
        "must end with codex-app-server.failure",
    ),
    (
        "a final failure rule that reads text",
        lambda t: t["harnesses"][3]["rules"][-2]["when"].update(text=["Error"]),
        "must end with gemini-cli.failure",
    ),
    (
        "a json condition with two operators",
        lambda t: t["harnesses"][0]["rules"][0]["when"]["json"][0].update(contains="x"),
        "exactly one of",
    ),
    (
        "an empty in",
        lambda t: t["harnesses"][0]["rules"][0]["when"]["json"][1].update({"in": []}),
        "at least one",
    ),
    (
        "present false",
        lambda t: t["harnesses"][4]["rules"][2]["when"]["json"][1].update(present=False),
        "true",
    ),
    (
        "a json path with an empty key",
        lambda t: t["harnesses"][0]["rules"][0]["when"]["json"][0].update(path="a..b"),
        "dot-separated",
    ),
    ("an empty text", lambda t: t["harnesses"][0]["rules"][8]["when"].update(text=[""]), "must not be empty"),
    ("an empty exit list", lambda t: t["harnesses"][3]["rules"][4]["when"].update(exit=[]), "non-empty list"),
    (
        "an error code beyond 2^53",
        lambda t: t["harnesses"][7]["rules"][1]["when"].update(error_code=[2**60]),
        "safe integer",
    ),
    (
        "a bad version range",
        lambda t: t["harnesses"][0]["capabilities"][0].update(versions=">=2.1"),
        "comparator",
    ),
    (
        "ranges with two spaces",
        lambda t: t["harnesses"][0]["capabilities"][1].update(versions=">=1.0.0  <2.0.0"),
        "one space",
    ),
    (
        "an unanchored session id pattern",
        lambda t: t["harnesses"][0].update(session_id="[0-9a-f-]+"),
        "anchored",
    ),
    (
        "a session id pattern that is no regex",
        lambda t: t["harnesses"][0].update(session_id="^([a-z]$"),
        "not a regular",
    ),
    (
        "a path that climbs out of the root",
        lambda t: t["harnesses"][1]["sessions"]["paths"].append("../{session_id}.jsonl"),
        "without . or ..",
    ),
    (
        "an absolute path",
        lambda t: t["harnesses"][1]["sessions"]["paths"].append("/etc/{session_id}"),
        "relative",
    ),
    (
        "an unknown placeholder",
        lambda t: t["harnesses"][1]["sessions"]["paths"].append("sessions/{home}/{session_id}.jsonl"),
        "placeholder",
    ),
    (
        "{cwd_key} without a scheme",
        lambda t: t["harnesses"][1]["sessions"]["paths"].append("p/{cwd_key}/{session_id}"),
        "without a cwd_key",
    ),
    (
        "a ** wildcard",
        lambda t: t["harnesses"][1]["sessions"]["paths"].append("sessions/**/{session_id}"),
        "**",
    ),
    ("no path", lambda t: t["harnesses"][1]["sessions"].update(paths=[]), "at least one path"),
    (
        "a harness named twice",
        lambda t: t["harnesses"].append(copy.deepcopy(t["harnesses"][0])),
        "claude-code is named twice",
    ),
    ("a format of another version", lambda t: t.update(format=2), "table.format"),
]


@pytest.mark.parametrize(("what", "plant", "said"), PLANTS, ids=[p[0] for p in PLANTS])
def test_a_wrong_table_is_refused_naming_where(what: str, plant: Any, said: str) -> None:
    table = raw()
    plant(table)
    with pytest.raises(harness.InvalidTable) as refused:
        validate(table)
    assert said in str(refused.value), str(refused.value)


def test_a_table_that_is_not_json_or_not_readable_is_refused(tmp_path: Path) -> None:
    with pytest.raises(harness.InvalidTable, match="is not JSON"):
        harness.validate_table(b"{")
    with pytest.raises(harness.InvalidTable, match="cannot be read"):
        harness.load_table(tmp_path / "missing.json")
    (tmp_path / "t.json").write_text(TABLE.read_text())
    assert harness.load_table(tmp_path / "t.json") == harness.shipped_table()


# ---- adapters, capabilities and version ranges -------------------------------------------------


def test_an_unknown_harness_is_refused_with_the_known_names() -> None:
    with pytest.raises(harness.UnknownHarness) as unknown:
        harness.adapter("cursor")
    assert "claude-code" in str(unknown.value) and unknown.value.harness == "cursor"


def test_capabilities_are_the_first_entry_whose_range_holds_the_version() -> None:
    claude = harness.adapter("claude-code")
    tested = claude.capabilities("2.1.332")
    assert tested is not None and tested.resume_keeps_id and tested.background_agents
    old = claude.capabilities("1.0.65")
    assert old is not None and old.resume_keeps_id is False  # claude-code#4926
    assert claude.capabilities("0.2.9") is None  # no entry: an untested version
    assert claude.capabilities("not a version") is None
    assert harness.adapter("codex").capabilities("v0.171.0-alpha.3") == harness.adapter("codex").capabilities(
        "0.171.0"
    )
    assert harness.adapter("opencode").capabilities("1.19.0") is None
    acp = harness.adapter("acp").capabilities("1")
    assert acp is not None and acp.load == "session/load"  # "" is every version
    for h in harness.shipped_table().harnesses:
        for version in h.tested_versions:
            assert harness.adapter(h.name).capabilities(version) is not None, (h.name, version)


@pytest.mark.parametrize(
    ("version", "range_", "holds"),
    [
        ("2.1.332", ">=2.0.0", True),
        ("2.1.332", ">=2.0.0 <2.1.332", False),
        ("2.1.332", ">2.1.331 <=2.1.332", True),
        ("2.1.332", "=2.1.332", True),
        ("2.1.0-beta.1", "=2.1.0", True),  # a pre-release suffix is ignored
        ("2.1.0+build.7", "<2.1.1", True),
        ("v0.61.0", ">=0.61.0", True),
        ("2", ">=2.0.0 <2.0.1", True),  # missing parts are 0
        ("2.10.0", ">2.9.0", True),  # numerically, not as text
        ("1.18.33", ">=1.18.0 <1.19.0", True),
        ("1.19.0", ">=1.18.0 <1.19.0", False),
        ("anything", "", False),
        ("0.0.0", "", True),
    ],
)
def test_version_ranges(version: str, range_: str, holds: bool) -> None:
    assert harness.satisfies(version, range_) is holds


@pytest.mark.parametrize(
    "bad", [">=2.1", ">= 2.1.0", "~2.1.0", ">=02.1.0", ">=2.1.0 ", "2.1.0", ">=2.1.0-rc"]
)
def test_a_range_that_is_not_one_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        harness.parse_range(bad)


# ---- the matcher, condition by condition -------------------------------------------------------


def rules(*when: dict[str, Any]) -> list[harness.Rule]:
    """Rules `t.r0`, `t.r1`... (class unclassified) for `when`s, then a catch-all `t.any`."""
    items: list[dict[str, Any]] = [
        {"id": f"t.r{i}", "class": "unclassified", "when": w, "evidence": ["test"], "note": ""}
        for i, w in enumerate(when)
    ]
    items.append({"id": "t.any", "class": None, "when": {}, "evidence": ["test"], "note": ""})
    return msgspec.convert(items, list[harness.Rule])


def first(outcome: dict[str, Any], *when: dict[str, Any]) -> str:
    return harness.assess_with(rules(*when), outcome).rule


def out(exit_code: int | None = 1, stdout: str = "", stderr: str = "", **more: Any) -> dict[str, Any]:
    return {"exit_code": exit_code, "stdout": stdout, "stderr": stderr, **more}


def test_exit_conditions() -> None:
    assert first(out(0), {"exit": "zero"}) == "t.r0"
    assert first(out(1), {"exit": "zero"}) == "t.any"
    assert first(out(None), {"exit": "nonzero"}) == "t.any"  # null is no exit code
    assert first(out(-9), {"exit": "nonzero"}) == "t.r0"
    assert first(out(None), {"exit": "none"}) == "t.r0"
    assert first(out(0), {"exit": "none"}) == "t.any"
    assert first(out(42), {"exit": [41, 42]}) == "t.r0"
    assert first(out(None), {"exit": [0]}) == "t.any"
    assert first(out(None), {"exit": "any"}) == "t.r0"


def test_json_equality_is_strict_and_one_document_must_hold_every_item() -> None:
    doc = '{"a": 1, "b": true, "c": "1", "d": null, "e": {"f": [1, {"g": 2}]}, "h": 1.0}'
    assert first(out(stdout=doc), {"json": [{"path": "a", "equals": 1}]}) == "t.r0"
    assert first(out(stdout=doc), {"json": [{"path": "a", "equals": "1"}]}) == "t.any"
    assert first(out(stdout=doc), {"json": [{"path": "b", "equals": 1}]}) == "t.any"  # true is not 1
    assert first(out(stdout=doc), {"json": [{"path": "a", "equals": True}]}) == "t.any"
    assert first(out(stdout=doc), {"json": [{"path": "h", "equals": 1}]}) == "t.r0"  # one JSON number
    assert first(out(stdout=doc), {"json": [{"path": "d", "equals": None}]}) == "t.r0"
    assert first(out(stdout=doc), {"json": [{"path": "e", "equals": {"f": [1, {"g": 2}]}}]}) == "t.r0"
    assert first(out(stdout=doc), {"json": [{"path": "e.f", "equals": [1, {"g": 2}]}]}) == "t.r0"
    assert first(out(stdout=doc), {"json": [{"path": "e.f", "equals": [{"g": 2}, 1]}]}) == "t.any"
    assert first(out(stdout=doc), {"json": [{"path": "e.f.0", "present": True}]}) == "t.any"  # keys only
    assert first(out(stdout=doc), {"json": [{"path": "c", "in": [1, "1"]}]}) == "t.r0"
    assert first(out(stdout=doc), {"json": [{"path": "a", "in": ["1", True]}]}) == "t.any"
    assert first(out(stdout=doc), {"json": [{"path": "c", "contains": "1"}]}) == "t.r0"
    assert first(out(stdout=doc), {"json": [{"path": "a", "contains": "1"}]}) == "t.any"  # not a string
    assert first(out(stdout=doc), {"json": [{"path": "d", "present": True}]}) == "t.r0"  # null resolves
    assert first(out(stdout=doc), {"json": [{"path": "z", "present": True}]}) == "t.any"
    lines = '{"type": "a", "x": 1}\n{"type": "b", "y": 2}\n'
    assert (
        first(out(stdout=lines), {"json": [{"path": "type", "equals": "b"}, {"path": "y", "equals": 2}]})
        == "t.r0"
    )
    # Every item must hold in the same document.
    assert (
        first(out(stdout=lines), {"json": [{"path": "type", "equals": "b"}, {"path": "x", "equals": 1}]})
        == "t.any"
    )


def test_documents_are_stdout_whole_else_its_object_lines() -> None:
    assert harness.prepare(out(stdout='{\n  "a": 1\n}\n')).documents == [{"a": 1}]  # pretty-printed
    assert harness.prepare(out(stdout='  {"a": 1}  \nnoise\n[{"b": 2}]\n{"c": \n{"d": 4}')).documents == [
        {"a": 1},
        {"d": 4},
    ]  # arrays and broken lines are not documents
    assert harness.prepare(out(stdout="[1, 2]")).documents == []
    assert harness.prepare(out(stdout='\x1b[1m{"a": 1}\x1b[0m')).documents == [{"a": 1}]  # ANSI removed
    assert harness.prepare(out(stdout='{"a": NaN}')).documents == []  # not JSON
    assert harness.prepare(out(stderr='{"a": 1}')).documents == []  # stdout only


def test_documents_are_read_from_the_first_1000_lines_and_mib_of_stdout_only() -> None:
    late_line = "x\n" * match.MAX_DOCUMENT_LINES + '{"late": true}\n'
    assert harness.prepare(out(stdout=late_line)).documents == []
    last_line = "x\n" * (match.MAX_DOCUMENT_LINES - 1) + '{"a": 1}'
    assert harness.prepare(out(stdout=last_line)).documents == [{"a": 1}]
    late_byte = "é" * (match.MAX_DOCUMENT_BYTES // 2) + '\n{"late": true}\n'
    assert harness.prepare(out(stdout=late_byte)).documents == []
    # A cut in the middle of a character never breaks the text before it.
    assert match._head("aé", 2) == "a" and match._head("aé", 3) == "aé"


def test_error_type_and_code_compare_strictly() -> None:
    err = out(None, error={"type": "BadRequestError", "code": -32002})
    assert first(err, {"error_type": ["BadRequestError"]}) == "t.r0"
    assert first(err, {"error_code": [-32002]}) == "t.r0"
    assert first(err, {"error_code": ["-32002"]}) == "t.any"  # a string never equals an int
    assert first(out(None), {"error_type": ["BadRequestError"]}) == "t.any"
    assert first(out(None, error={"type": None, "code": None}), {"error_code": [0]}) == "t.any"
    assert first(err, {"error": True}) == "t.r0"
    assert first(out(None), {"error": True}) == "t.any"
    assert first(out(None), {"error": False}) == "t.r0"


def test_text_is_stderr_then_stdout_without_ansi_case_sensitive_and_unless_text_excludes() -> None:
    colour = out(stderr="\x1b[91m\x1b[1mError: \x1b[0mSession not found\n")
    assert first(colour, {"text": ["Error: Session not found"]}) == "t.r0"
    osc = out(stdout="\x1b]8;;file:///x\x07link\x1b]8;;\x07 ok")
    assert harness.prepare(osc).text == "\nlink ok"
    assert first(colour, {"text": ["error: session not found"]}) == "t.any"  # case-sensitive
    assert first(colour, {"text": ["nothing", "Session not"]}) == "t.r0"  # any of them
    assert first(colour, {"text": ["Session"], "unless_text": ["not found"]}) == "t.any"
    assert first(out(stderr="a", stdout="b"), {"text": ["a\nb"]}) == "t.r0"
    assert first(out(), {"text": ["x"], "exit": "zero"}) == "t.any"  # every condition must hold


def test_the_first_rule_that_holds_decides() -> None:
    assert first(out(1, stderr="x"), {"text": ["x"]}, {"exit": "nonzero"}) == "t.r0"
    assert first(out(1, stderr="y"), {"text": ["x"]}, {"exit": "nonzero"}) == "t.r1"


@pytest.mark.parametrize(
    ("outcome", "field", "code"),
    [
        ({"exit_code": True, "stdout": "", "stderr": ""}, "exit_code", "invalid_field"),
        ({"exit_code": "1", "stdout": "", "stderr": ""}, "exit_code", "invalid_field"),
        ({"exit_code": 1.5, "stdout": "", "stderr": ""}, "exit_code", "invalid_field"),
        ({"exit_code": 2**60, "stdout": "", "stderr": ""}, "exit_code", "invalid_field"),
        ({"exit_code": 1, "stdout": None, "stderr": ""}, "stdout", "invalid_field"),
        ({"exit_code": 1, "stdout": "", "stderr": b"x"}, "stderr", "invalid_field"),
        ({"exit_code": 1, "stdout": "", "stderr": "", "colour": 1}, "outcome", "invalid_field"),
        ({"stdout": ""}, "outcome", "invalid_field"),
        ({"exit_code": 1, "error": {"type": 3}}, "error.type", "invalid_field"),
        ({"exit_code": 1, "error": {"code": 1.5}}, "error.code", "invalid_field"),
        ({"exit_code": 1, "error": {"code": True}}, "error.code", "invalid_field"),
        ({"exit_code": 1, "error": {"type": "X", "detail": "y"}}, "error", "invalid_field"),
        ({"exit_code": 1, "error": "BadRequestError"}, "error", "invalid_field"),
        ({"exit_code": 1, "stdout": "x" * (4 * 1024 * 1024), "stderr": "y"}, "outcome", "payload_too_large"),
    ],
)
def test_bad_outcomes_are_refused_naming_the_field(outcome: dict[str, Any], field: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        harness.adapter("claude-code").assess(outcome)
    assert refused.value.code == code and (refused.value.field or "").startswith(field), (
        refused.value.field,
        str(refused.value),
    )


def test_an_outcome_struct_made_with_wrong_types_is_refused_too() -> None:
    # A Struct is not checked when it is made: assess checks it.
    for bad in (
        harness.Outcome(exit_code="1"),  # type: ignore[arg-type]
        harness.Outcome(exit_code=False),
        harness.Outcome(exit_code=1, stdout=None),  # type: ignore[arg-type]
        harness.Outcome(exit_code=1, error={"type": "X"}),  # type: ignore[arg-type]
        harness.Outcome(exit_code=1, error=harness.OutcomeError(code=1.0)),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidRequest):
            harness.adapter("codex").assess(bad)
    with pytest.raises(InvalidRequest):
        harness.adapter("codex").assess(["exit_code", 1])  # type: ignore[arg-type]
    # The bound counts UTF-8 bytes: 4 MiB of 2-byte characters is too much at half the length.
    with pytest.raises(InvalidRequest) as big:
        harness.adapter("codex").assess(harness.Outcome(exit_code=1, stderr="é" * (2 * 1024 * 1024 + 1)))
    assert big.value.code == "payload_too_large"
    assert harness.adapter("codex").assess(harness.Outcome(exit_code=1, stderr="é" * (2 * 1024 * 1024 - 1)))


def test_decode_outcome_reads_json_and_names_what_is_wrong() -> None:
    assert harness.decode_outcome(b'{"exit_code": null}') == harness.Outcome(exit_code=None)
    for data, said in [
        (b"not json", "not JSON"),
        (b"[]", "Expected `object`"),
        (b'{"exit_code": 1, "stdout": 3}', "stdout"),
        (b'{"exit_code": 1, "stdout": "", "stderr": "", "extra": 1}', "unknown field"),
    ]:
        with pytest.raises(InvalidRequest) as refused:
            harness.decode_outcome(data)
        assert said in str(refused.value), str(refused.value)


def test_json_equal() -> None:
    assert harness.json_equal({"a": [1, None]}, {"a": [1.0, None]})
    assert not harness.json_equal(True, 1) and not harness.json_equal(0, False)
    assert not harness.json_equal("1", 1) and not harness.json_equal(None, 0)
    assert not harness.json_equal({"a": 1}, {"a": 1, "b": 2}) and not harness.json_equal([1], (1,))
    assert not harness.json_equal(float("nan"), float("nan"))


def test_an_error_type_with_a_lone_surrogate_is_classified_not_crashed() -> None:
    # A lone surrogate cannot be encoded to UTF-8 strictly: measuring the outcome must not fail.
    assessed = harness.adapter("openai-agents").assess(
        harness.Outcome(exit_code=None, error=harness.OutcomeError(type="Err\ud800or", code=None))
    )
    assert assessed.rule.startswith("openai-agents.")
