"""docs/integrate-a-runner.md matches the code: its action table has one row per action of the
contract, every SDK call its examples make exists, every error class it names is the SDK's, and
the README links it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import continuity_runner
from continuity_runner import Runner
from continuity_runner.types import Action

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
