"""The shared corpus (sdk/harness-corpus.json), which the TypeScript SDK's tests play too: every case
classified by the Python adapter exactly as it expects, and the corpus itself as the design asks
(all eight harnesses, false positives, the four CLIs' real offline outcomes verbatim, the shapes
seen in the field, each case citing where it was seen)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from continuity_runner import harness

ROOT = Path(__file__).resolve().parents[2]
CORPUS = json.loads((ROOT / "sdk" / "harness-corpus.json").read_text())
CASES: list[dict[str, Any]] = CORPUS["cases"]
ISSUE = re.compile(r"\b[A-Za-z0-9_.-]+#\d+\b")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_each_case_is_classified_as_it_expects(case: dict[str, Any]) -> None:
    assessed = harness.adapter(case["harness"]).assess(case["outcome"])
    assert {"failure_class": assessed.failure_class, "rule": assessed.rule} == case["expect"]


def test_the_corpus_covers_every_harness_with_false_positives() -> None:
    assert CORPUS["format"] == 1
    assert len(CASES) >= 48
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))
    per_harness = Counter(c["harness"] for c in CASES)
    assert set(per_harness) == set(harness.names())
    assert min(per_harness.values()) >= 4, per_harness
    negatives = [c for c in CASES if c["expect"]["failure_class"] is None]
    assert len(negatives) >= 8
    assert len({c["harness"] for c in negatives}) == len(harness.names())  # one per harness at least
    for c in CASES:
        assert c["id"].startswith(f"{c['harness']}.")
        assert set(c) == {"id", "harness", "outcome", "expect", "source"}
        assert set(c["outcome"]) <= {"exit_code", "stdout", "stderr", "error"}
        rules = {r.id for r in harness.adapter(c["harness"]).spec.rules}
        assert c["expect"]["rule"] in rules, c["id"]


def test_every_case_cites_its_source() -> None:
    for c in CASES:
        source = c["source"]
        assert source.startswith(("real:", "source:", "design:", "harness-failures")) or ISSUE.search(
            source
        ), c
        if source.startswith("real:"):
            # A real capture names the harness's package and a version the table was tested with.
            spec = harness.adapter(c["harness"]).spec
            assert any(v in source for v in spec.tested_versions), c["id"]


def test_every_class_is_reached_by_some_case_of_a_harness_that_keeps_files() -> None:
    with_files = {h.name for h in harness.shipped_table().harnesses if h.sessions is not None}
    reached = {c["expect"]["failure_class"] for c in CASES if c["harness"] in with_files}
    assert set(harness.HARNESS_CLASSES) | {None} <= reached


REAL = {
    # harness: (exit code, the line of stderr, verbatim; {id} is the session id asked for)
    "claude-code": (1, "No conversation found with session ID: {id}"),
    "codex": (
        1,
        "Error: thread/resume: thread/resume failed: no rollout found for thread id {id} (code -32600)",
    ),
    "gemini-cli": (42, "Error resuming session: No previous sessions found for this project."),
    "opencode": (1, "\x1b[91m\x1b[1mError: \x1b[0mSession not found"),
}


@pytest.mark.parametrize("name", list(REAL))
def test_the_real_offline_outcome_of_each_cli_is_kept_verbatim(name: str) -> None:
    code, line = REAL[name]
    real = [c for c in CASES if c["harness"] == name and c["source"].startswith("real:")]
    matches = []
    for c in real:
        lines = c["outcome"]["stderr"].splitlines()
        ids = re.findall(
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", c["outcome"]["stderr"]
        )
        if c["outcome"]["exit_code"] == code and any(line.format(id=i) in lines for i in ids or [""]):
            matches.append(c)
    assert matches, f"no real case of {name} holds {line!r}"
    for c in matches:
        assert c["expect"]["failure_class"] == "native_session_missing"


def test_the_opencode_capture_keeps_its_colour_codes() -> None:
    [case, *_] = [c for c in CASES if c["id"] == "opencode.real.session-not-found"]
    assert case["outcome"]["stderr"] == "\x1b[91m\x1b[1mError: \x1b[0mSession not found\n"


SHAPES = [
    # (a case's text holds, its class)
    ("tool_use` ids were found without `tool_result` blocks", "transcript_corrupt"),
    ("Invalid signature in thinking block", "transcript_corrupt"),
    ("Invalid `signature` in `thinking` block", "transcript_corrupt"),
    ("Prompt is too long", "context_overflow"),
    ("context_length_exceeded", "context_overflow"),
    ("is currently running as a background agent", "session_busy"),
    ("already has an active writer", "session_busy"),
    ("thread not loaded", "unclassified"),
    ("state db missing rollout path", "native_session_missing"),
    ("state db missing rollout path", None),
    ("Invalid session identifier", "native_session_missing"),
    ("Session not found", "native_session_missing"),
    ("-32002", "native_session_missing"),
    ("failed to record rollout items", None),
    ("no rollout found for thread id", None),
    ("No conversation found with session ID", None),
]


@pytest.mark.parametrize(("shape", "expected"), SHAPES, ids=[f"{s} -> {e}" for s, e in SHAPES])
def test_the_shapes_seen_in_the_field_are_in_the_corpus(shape: str, expected: str | None) -> None:
    def text(case: dict[str, Any]) -> str:
        return (
            json.dumps(case["outcome"], ensure_ascii=False)
            + str(case["outcome"]["stdout"])
            + str(case["outcome"]["stderr"])
        )

    assert any(shape in text(c) and c["expect"]["failure_class"] == expected for c in CASES), (
        shape,
        expected,
    )


def test_a_prompt_too_long_returned_as_a_success_is_an_overflow() -> None:
    [case] = [c for c in CASES if c["id"] == "claude-code.prompt-too-long-as-success"]
    [document] = harness.prepare(case["outcome"]).documents
    assert case["outcome"]["exit_code"] == 0 and document["is_error"] is False
    assert case["expect"]["failure_class"] == "context_overflow"


def test_is_error_at_exit_zero_is_never_a_success() -> None:
    cases = [
        c
        for c in CASES
        if c["outcome"]["exit_code"] == 0
        and any(d.get("is_error") is True for d in harness.prepare(c["outcome"]).documents)
    ]
    assert cases, "the corpus holds paperclip#7974's shape"
    assert all(c["expect"]["failure_class"] is not None for c in cases)
