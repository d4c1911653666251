"""The command's own help and argument handling, and output that fits 100 columns."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import pty
import shlex
import struct
import sys
import termios
from pathlib import Path

import pytest

from continuity.cli import envfile, exits, explain, tables
from continuity.cli import main as cli
from continuity.cli.examples import commands, parsers
from continuity.tools.simulate.command import scenario_mix
from continuity.tools.simulate.report import fit


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def test_every_command_shows_examples_in_its_help() -> None:
    paths = dict(commands(cli.build_parser()))
    assert {"up", "simulate", "runs retry", "sessions get", "completion"} <= set(paths)
    missing = [path for path, parser in paths.items() if "examples:" not in (parser.epilog or "")]
    assert missing == []
    assert all(f"continuity {path}" in (parser.epilog or "") for path, parser in paths.items())


# Groups whose module is being changed elsewhere; each is still checked to lack its examples, so
# that this list shrinks as they gain them.
GROUPS_WITHOUT_EXAMPLES_YET: set[str] = set()


def example_commands(epilog: str) -> list[list[str]]:
    """The `continuity ...` commands of a help's examples: continuation lines joined, comments
    dropped, each split at `|`, `&&`, `;` and with redirections left out."""
    text = epilog.split("examples:\n", 1)[1].replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        commands = [words]
        redirect = False
        for token in lexer:
            if set(token) <= set("<>"):
                redirect = True
            elif set(token) <= set("|&;"):
                words, redirect = [], False
                commands.append(words)
            elif redirect:
                redirect = False
            else:
                words.append(token)
        found += [c for c in commands if c and c[0] == "continuity"]
    return found


def test_every_help_groups_included_ends_with_examples_that_parse() -> None:
    parser = cli.build_parser()
    paths = dict(parsers(parser))
    assert {"", "runs", "sessions", "dead", "reconciliations", "runs retry"} <= set(paths)
    without = set()
    for path, command in paths.items():
        help_text = command.format_help().rstrip()
        if "\nexamples:\n" not in help_text:
            without.add(path)
            continue
        last = help_text.rsplit("\n\n", 1)[1]
        # The examples are the help's last block, and each one is a command of this parser.
        assert last.startswith("examples:\n"), path
        assert last == (command.epilog or "").rsplit("\n\n", 1)[-1].rstrip(), path
        examples = example_commands(last)
        assert examples, path
        for words in examples:
            assert " ".join(words).startswith(f"continuity {path}".strip()), (path, words)
            stderr = io.StringIO()
            try:
                with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                    parser.parse_args(words[1:])
            except SystemExit:
                pytest.fail(f"{shlex.join(words)}: {stderr.getvalue()}")
    assert without == GROUPS_WITHOUT_EXAMPLES_YET


def test_a_help_without_examples_or_with_a_wrong_one_is_found() -> None:
    assert example_commands("examples:\n  continuity dead show 42   # once fixed") == [
        ["continuity", "dead", "show", "42"]
    ]
    assert example_commands("examples:\n  echo x \\\n    | continuity harness classify < o.json") == [
        ["continuity", "harness", "classify"]
    ]
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        cli.build_parser().parse_args(["runs", "get", "run-7f3a"])


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.startswith("continuity 0.")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["runs", "show", "--json"], "the following arguments are required: RUN_ID"),
        (["reconciliations", "list", "--limit", "0", "--json"], "--limit: must be between 1 and 1000"),
        (["runs", "show", "r-1", "--timeout", "-1", "--json"], "--timeout: must be more than 0"),
        (["simulate", "--runners", "0", "--json"], "--runners: must be at least 1"),
    ],
)
def test_argument_errors_under_json_are_json(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert code == exits.EXIT_BAD_INPUT
    error = json.loads(out)["error"]
    assert error["code"] == "invalid_argument" and said in error["message"]
    assert "usage:" not in out + err


def test_argument_errors_without_json_print_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["runs", "show", "r-1", "--timeout", "nan"], capsys)
    assert code == 2 and out == "" and "usage:" in err and "not a finite number" in err


def test_completion_scripts_name_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    for shell in ("bash", "zsh"):
        assert cli.main(["completion", shell]) == 0
        script = capsys.readouterr().out
        assert "reconciliations" in script and "simulate" in script


def test_env_file_is_read_when_a_variable_is_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NATS_URL", raising=False)
    assert envfile.setting("NATS_URL") is None
    envfile.write_env_file(tmp_path / ".continuity" / "env", {"NATS_URL": "nats://127.0.0.1:4333", "X": "y"})
    assert envfile.setting("NATS_URL") == "nats://127.0.0.1:4333"
    assert envfile.read_env_file() == {"NATS_URL": "nats://127.0.0.1:4333"}  # only shared names
    monkeypatch.setenv("NATS_URL", "nats://elsewhere:4222")
    assert envfile.setting("NATS_URL") == "nats://elsewhere:4222"


def test_each_request_subject_names_its_service() -> None:
    assert explain.service_for("continuity.sessions.get") == "session-store"
    assert explain.service_for("continuity.sessions.r-1.get") == "session-store"
    assert explain.service_for("continuity.runners.put") == "session-store"
    assert explain.service_for("continuity.runs.get") == "reconciliation"
    assert explain.service_for("continuity.operator.retry") == "reconciliation"
    assert explain.service_for("continuity.reconciliations.list") == "reconciliation"


def test_long_tables_are_cut_with_an_ellipsis_not_wrapped() -> None:
    run_id = "run-" + "x" * 26
    rows = [
        [
            run_id,
            "sim-r01",
            "3",
            "a tool with a very long name " * 3,
            "2026-12-01T08:00:00.123456+00:00",
            "open",
        ],
        ["run-2", "sim-r02", "1", "short", "2026-12-01T08:00:01+00:00", "delivered"],
    ]
    text = tables.table(["RUN ID", "RUNNER", "ATTEMPT", "TOOL", "OPENED AT", "STATUS"], rows, 100)
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines), text
    assert "\u2026" in lines[1] and lines[1].rstrip().endswith("open")
    assert lines[1].startswith(run_id + "  ")  # the row's name is never cut
    # Columns still line up: each header starts where its cells do.
    assert lines[0].index("STATUS") == lines[1].index("open") == lines[2].index("delivered")
    short = tables.table(["A", "B"], [["1", "2"]], 100)
    assert "\u2026" not in short


LONG_ROW = ["run-1", "operator", "native_provider_state_incompatible " * 3, "continuity.decisions.sim-r01"]
HEADERS = ["RUN ID", "STATUS", "REASON", "SUBJECT"]


def test_tables_take_the_width_columns_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    lines = tables.table(HEADERS, [LONG_ROW]).splitlines()
    assert all(len(line) <= 60 for line in lines) and "\u2026" in lines[1], lines
    monkeypatch.setenv("COLUMNS", "240")
    assert tables.table(HEADERS, [LONG_ROW]).splitlines()[1].split() == " ".join(LONG_ROW).split()


def test_tables_are_not_cut_when_not_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    print(tables.table(HEADERS, [LONG_ROW]))  # stdout is captured here: a pipe, not a terminal
    lines = capsys.readouterr().out.splitlines()
    assert "\u2026" not in lines[1] and len(lines[1]) > 100
    assert lines[1].split() == " ".join(LONG_ROW).split()  # every cell whole


def test_tables_fit_the_terminal_they_are_printed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 72, 0, 0))
    with os.fdopen(slave, "w") as terminal, os.fdopen(master, "rb"):
        monkeypatch.setattr(sys, "stdout", terminal)
        assert tables.output_width() == 72
        lines = tables.table(HEADERS, [LONG_ROW]).splitlines()
    assert all(len(line) <= 72 for line in lines) and "\u2026" in lines[1], lines


def test_a_column_keeps_16_characters_and_the_run_id_whole_in_a_narrow_terminal() -> None:
    """docs/operator.md: past the floors a line is wider than the terminal, never unreadable."""
    run_id = "run-" + "x" * 30
    row = [run_id, "operator", "native_provider_state_incompatible", "2026-12-01T08:00:00+00:00", "sim-r01"]
    lines = tables.table(["RUN ID", "STATUS", "REASON", "UPDATED", "RUNNER"], [row], 60).splitlines()
    assert len(lines[1]) > 60 and lines[1].startswith(run_id + "  ")
    cells = lines[1][len(run_id) :].split()
    assert "native_provider\u2026" in cells and "2026-12-01T08:0\u2026" in cells  # 16 characters each
    assert all(len(cell) >= min(16, len(whole)) for cell, whole in zip(cells, row[1:], strict=True))


def test_fit_wraps_at_100_columns() -> None:
    text = fit("word " * 60, "    ")
    assert all(len(line) <= 100 for line in text.splitlines()) and len(text.splitlines()) > 2


def test_scenarios_are_picked_by_name() -> None:
    assert scenario_mix("pending,refusal") == {"pending": 10, "refusal": 10}
    with pytest.raises(ValueError, match="unknown scenario"):
        scenario_mix("pending,nope")


@pytest.mark.parametrize("kind", ["pipeline", "sessions"])
def test_benchmarks_take_the_median_of_five_alternating_rounds_by_default(kind: str) -> None:
    args = cli.build_parser().parse_args(["bench", kind])
    assert args.rounds == 5
