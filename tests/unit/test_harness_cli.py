"""`continuity harness classify|list`: the table's classes from the command line, as a runner's
adapter gives them (every corpus case), bad input refused on one line with exit code 2, the
harnesses listed, and the names offered to shell completion."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from continuity_runner import harness

from continuity.cli import main as cli
from continuity.cli.exits import EXIT_BAD_INPUT, EXIT_OK

ROOT = Path(__file__).resolve().parents[2]
CASES: list[dict[str, Any]] = json.loads((ROOT / "sdk" / "harness-corpus.json").read_text())["cases"]
CONTINUITY = str(Path(sys.executable).parent / "continuity")


def classify(
    name: str, stdin: bytes, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    try:
        code = cli.main(["harness", "classify", "--harness", name])
    except SystemExit as exited:
        code = int(exited.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_classify_gives_every_corpus_case_its_class_and_rule(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for case in CASES:
        code, out, err = classify(case["harness"], json.dumps(case["outcome"]).encode(), capsys, monkeypatch)
        assert (code, err) == (EXIT_OK, ""), case["id"]
        assert json.loads(out) == case["expect"], case["id"]


def test_classify_runs_as_the_installed_command() -> None:
    case = next(c for c in CASES if c["id"] == "opencode.real.session-not-found")
    done = subprocess.run(
        [CONTINUITY, "harness", "classify", "--harness", "opencode"],
        input=json.dumps(case["outcome"]),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert json.loads(done.stdout) == {"failure_class": "native_session_missing", "rule": "opencode.missing"}


@pytest.mark.parametrize(
    ("stdin", "said"),
    [
        (b"", "stdin is empty"),
        (b"   \n", "stdin is empty"),
        (b"not json", "not JSON [malformed_json]"),
        (b"[1, 2]", "Expected `object`"),
        (b'{"exit_code": "1", "stdout": "", "stderr": ""}', "exit_code"),
        (b'{"exit_code": true, "stdout": "", "stderr": ""}', "exit_code"),
        (b'{"exit_code": 1, "stdout": "", "stderr": "", "colour": "red"}', "unknown field"),
        (b'{"exit_code": 1, "error": {"type": "X", "code": 1.5}}', "error.code"),
        (b'{"exit_code": 1, "stdout": "' + b"x" * (4 * 1024 * 1024 + 1) + b'"}', "[payload_too_large]"),
        (b'{"exit_code": 1, "stdout": "\xff"}', "not JSON"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_code_2(
    stdin: bytes, said: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = classify("claude-code", stdin, capsys, monkeypatch)
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.count("\n") == 1 and err.startswith("continuity: error: the outcome: ") and said in err, err


def test_stdin_beyond_its_bound_is_refused_without_reading_it_all(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from continuity.cli.harness import STDIN_LIMIT

    code, out, err = classify("codex", b" " * (STDIN_LIMIT + 1), capsys, monkeypatch)
    assert code == EXIT_BAD_INPUT and out == "" and "[payload_too_large]" in err and err.count("\n") == 1


def test_an_unknown_harness_is_exit_code_2_naming_the_known_ones(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = classify("cursor", b'{"exit_code": 1}', capsys, monkeypatch)
    assert code == EXIT_BAD_INPUT and out == ""
    assert "invalid choice: 'cursor'" in err and "codex-app-server" in err


def test_list_names_the_harnesses_their_titles_and_tested_versions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["harness", "list"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    table = harness.shipped_table()
    assert lines[0] == f"Harness table {table.version}"
    assert lines[1].split()[:3] == ["NAME", "TITLE", "KIND"]
    assert [line.split()[0] for line in lines[2:]] == harness.names()
    for line, h in zip(lines[2:], table.harnesses, strict=True):
        assert h.title in line and (", ".join(h.tested_versions) or "-") in line

    assert cli.main(["harness", "list", "--json"]) == EXIT_OK
    listed = json.loads(capsys.readouterr().out)
    assert listed["version"] == table.version
    assert [(h["name"], h["title"], h["tested_versions"]) for h in listed["harnesses"]] == [
        (h.name, h.title, h.tested_versions) for h in table.harnesses
    ]
    assert {h["name"]: h["sessions"] for h in listed["harnesses"]}["opencode"] is False


def test_completion_offers_the_harness_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert "classify" in script and "codex-app-server" in script and "openai-agents" in script
