"""docs/integrate-a-runner.md matches the code: its action table has one row per action of the
contract, every SDK call its examples make exists, every error class it names is the SDK's, every
`continuity` command its prose writes out parses as written, and the README links it."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path
from typing import get_args
from unittest import mock

import continuity_runner
from continuity_runner import Runner
from continuity_runner.types import Action

from continuity.cli import runners
from continuity.cli.main import build_parser
from shared.contract.types import Action as ServerAction

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "integrate-a-runner.md"


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _first_cells(section: str) -> list[str]:
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [row.split("|")[1].strip().strip("`") for row in rows]


def test_one_row_per_action_of_the_contract() -> None:
    actions = _first_cells(_section("What to do for each decision action"))
    assert sorted(actions) == sorted(get_args(Action)) == sorted(get_args(ServerAction))


def test_every_error_class_named_is_the_sdks() -> None:
    names = _first_cells(_section("Errors"))
    assert names
    for name in names:
        cls = getattr(continuity_runner, name)
        assert issubclass(cls, continuity_runner.ContinuityError), name


def test_every_call_in_the_examples_exists() -> None:
    code = "\n".join(re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL))
    calls = set(re.findall(r"\brunner\.(\w+)\(", code))
    assert {"decide", "commit", "reject", "report_resume_failure", "serve_archive"} <= calls
    for name in calls:
        assert callable(getattr(Runner, name, None)), name
    # The Python sections name Python calls; the TypeScript section names its own, camelCase.
    python_part = DOC.read_text().split("## TypeScript")[0]
    prose = set(re.findall(r"`(\w+)\(", python_part))
    for name in prose - {"connect"}:
        assert callable(getattr(Runner, name, None)), name


def test_the_links_resolve_and_the_readme_links_here() -> None:
    prose = re.sub(r"```.*?```", "", DOC.read_text(), flags=re.DOTALL)
    for target in re.findall(r"\]\(([^)#]+)\)", prose):
        assert (DOC.parent / target).exists(), target
    assert "(docs/integrate-a-runner.md)" in (ROOT / "README.md").read_text()
    assert "## TypeScript" in DOC.read_text()


PLACEHOLDERS = {
    "RUNNER_ID": "r-1",
    "TENANT[,TENANT...]": "acme,globex",
    "T[,T...]": "acme,globex",
    "TENANT": "acme",
    "FILE": "r-1.nk",
    "NAME": "claude-code",
    "N": "10000",
}


def command_error(span: str) -> str | None:
    """What the parser says of a `continuity ...` span with its placeholders filled in; None
    when it parses, or when the span names a command without writing it out (`continuity runs
    retry`: every word a command of the one before)."""
    words = [PLACEHOLDERS.get(w, w) for w in shlex.split(span)][1:]
    parser = build_parser()
    for word in words:
        below = {
            n: c
            for a in parser._actions
            if isinstance(a, argparse._SubParsersAction)
            for n, c in a.choices.items()
        }
        if word not in below:
            break
        parser = below[word]
    else:
        return None
    stderr, stdout = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
            args = build_parser().parse_args(words)
    except SystemExit as exit_:
        return stderr.getvalue().strip().splitlines()[-1] if exit_.code else None
    if args.func is runners._checked_add:
        # Its required options are checked before it writes or connects to anything: run that
        # check, and nothing after it.
        with (
            mock.patch.object(runners, "_add", return_value=0),
            contextlib.redirect_stderr(stderr),
            contextlib.redirect_stdout(stdout),
        ):
            if args.func(args) != 0:
                return (stderr.getvalue() + stdout.getvalue()).strip()
    return None


def test_every_command_the_prose_writes_out_parses() -> None:
    """`continuity runners add RUNNER_ID --tenant T` without `--seed-file` was written here once:
    the command refuses it."""
    for doc in (DOC, ROOT / "README.md"):
        prose = " ".join(re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL).split())
        spans = re.findall(r"`(continuity runners add [^`]*)`", prose)
        assert spans, doc
        for span in re.findall(r"`(continuity [a-z]+ [a-z]+ [^`]*[A-Z-][^`]*)`", prose):
            if "|" in span or "..." in span.replace("[,TENANT...]", "").replace("[,T...]", ""):
                continue  # alternatives (`list|show`) and elisions are not commands to run
            assert command_error(span) is None, f"{doc.name}: `{span}`: {command_error(span)}"


def test_a_command_written_without_a_required_option_is_found() -> None:
    assert command_error("continuity runners add RUNNER_ID --tenant T") is not None
    assert command_error("continuity runners add RUNNER_ID --tenant T --seed-file FILE") is None
    assert command_error("continuity runs retry") is None
