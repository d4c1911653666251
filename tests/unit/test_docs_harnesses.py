"""docs/harnesses (generated from sdk/harnesses.json by continuity.tools.harness_docs) and the
"Harness adapters" step of docs/integrate-a-runner.md match what they describe: the pages are the
generator's output, the command-line example prints what the page says, the harnesses "run by the
tests" are the ones the real-binary tests run, and the rows and options named are the shipped
ones."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

from continuity_runner import Runner, harness

from continuity.tools import harness_docs
from shared.policy.policy import SHIPPED
from tests.support.harness_clis import CLIS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "harnesses"
INTEGRATE = ROOT / "docs" / "integrate-a-runner.md"
CLI = str(Path(sys.executable).parent / "continuity")


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_pages_are_generated_from_the_table() -> None:
    expected = harness_docs.pages()
    assert set(expected) == {"README.md", *(f"{name}.md" for name in harness.names())}
    assert harness_docs.stale(expected) == [], "run `python -m continuity.tools.harness_docs`"
    assert harness_docs.main(["--check"]) == 0


def test_a_page_that_differs_from_the_table_is_found(tmp_path: Path) -> None:
    expected = harness_docs.pages()
    for name, text in expected.items():
        (tmp_path / name).write_text(text)
    assert harness_docs.stale(expected, tmp_path) == []
    (tmp_path / "codex.md").write_text(expected["codex.md"].replace("`codex.missing.rollout`", "`codex.x`"))
    (tmp_path / "old-harness.md").write_text("")
    (tmp_path / "acp.md").unlink()
    assert harness_docs.stale(expected, tmp_path) == ["acp.md", "codex.md", "old-harness.md"]


def test_each_page_names_every_rule_and_each_class_row_of_the_shipped_policy() -> None:
    table = harness.shipped_table()
    for spec in table.harnesses:
        text = (DOCS / f"{spec.name}.md").read_text()
        for rule in spec.rules:
            assert f"| `{rule.id}` |" in text, (spec.name, rule.id)
        rows = section(text, "What Continuity does with each class")
        for line in rows.splitlines()[4:]:
            klass = line.split("|")[1].strip().strip("`")
            ids = re.findall(r"`(4\.4\.\d+)`", line)
            assert ids == [row.id for row in SHIPPED.recovery if klass in row.classes], (spec.name, klass)


def test_the_links_of_the_pages_resolve() -> None:
    readme = (DOCS / "README.md").read_text()
    for name in harness.names():
        assert f"]({name}.md)" in readme, name
    for page in DOCS.glob("*.md"):
        prose = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", prose):
            assert (page.parent / target).exists(), (page.name, target)
    anchor = re.search(r"\(\.\./integrate-a-runner\.md#([a-z-]+)\)", readme)
    assert (
        anchor is not None
        and f"## {anchor.group(1).replace('-', ' ').capitalize()}\n" in INTEGRATE.read_text()
    )


def test_the_harnesses_run_by_the_tests_are_the_real_binary_tests_clis() -> None:
    readme = (DOCS / "README.md").read_text()
    run = {
        m.group(1)
        for m in re.finditer(r"^\| \[[^]]+\]\([^)]+\) `([a-z-]+)` \|.*\| yes \|$", readme, re.MULTILINE)
    }
    assert run == set(CLIS)
    for name, cli in CLIS.items():
        assert (
            f"`{cli.package}@{cli.version}`, pinned in `tests/harnesses/package.json`"
            in (DOCS / f"{name}.md").read_text()
        )


def test_the_command_line_example_prints_what_the_page_shows() -> None:
    readme = (DOCS / "README.md").read_text()
    shown = re.search(r"```sh\necho '(.*)' \\\n  \| continuity harness classify --harness (\S+)\n```", readme)
    printed = re.search(r"```json\n(.*?)```", readme, re.DOTALL)
    assert shown is not None and printed is not None
    done = subprocess.run(
        [CLI, "harness", "classify", "--harness", shown.group(2)],
        input=shown.group(1),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(printed.group(1))
    # The exit code the page gives a bad outcome and an unknown harness.
    for argv, stdin in (
        (["--harness", "claude-code"], '{"exit_code": "1"}'),
        (["--harness", "no-such-harness"], '{"exit_code": 1}'),
    ):
        bad = subprocess.run(
            [CLI, "harness", "classify", *argv], input=stdin, capture_output=True, text=True, check=False
        )
        assert bad.returncode == 2, (argv, bad.stdout, bad.stderr)
    assert "exit code 0; 2 for a bad outcome or an unknown harness" in readme.replace("\n", " ")
    listed = subprocess.run([CLI, "harness", "list", "--json"], capture_output=True, text=True, check=True)
    assert [h["name"] for h in json.loads(listed.stdout)["harnesses"]] == harness.names()


def test_a_session_id_off_the_pattern_is_absent_without_a_look(tmp_path: Path) -> None:
    # "A session id that does not match the harness's pattern is `absent` without touching the
    # disk": even with a file of that name where the session would be.
    (tmp_path / "projects" / "-w").mkdir(parents=True)
    for session_id in ("not-a-uuid", "3F1C2A9E-1B2C-4D5E-8F90-123456789ABC"):
        (tmp_path / "projects" / "-w" / f"{session_id}.jsonl").write_text("")
        probe = harness.adapter("claude-code").probe(
            session_id, cwd="/w", env={"CLAUDE_CONFIG_DIR": str(tmp_path)}
        )
        assert probe == "absent", session_id
    good = "3f1c2a9e-1b2c-4d5e-8f90-123456789abc"
    (tmp_path / "projects" / "-w" / f"{good}.jsonl").write_text("")
    assert (
        harness.adapter("claude-code").probe(good, cwd="/w", env={"CLAUDE_CONFIG_DIR": str(tmp_path)})
        == "present"
    )
    # "The table gives no files to look for: `adapter.probe` answers `unknown`."
    assert harness.adapter("opencode").probe(f"ses_{'a' * 26}", cwd="/w", env={"HOME": "/"}) == "unknown"


def test_the_integrate_step_names_the_shipped_rows_options_and_examples() -> None:
    step = section(INTEGRATE.read_text(), "Harness adapters")
    rows = {row.id: row for row in SHIPPED.recovery}
    for klass, row_id, verdict in (
        ("native_session_missing", "4.4.10", "continue_fresh"),
        ("context_overflow", "4.4.11", "operator"),
        ("transcript_corrupt", "4.4.12", "operator"),
        ("session_busy", "4.4.13", "retry_same_session"),
    ):
        assert f"`{row_id}`" in step and f"`{klass}`" in step
        assert rows[row_id].classes == (klass,) and rows[row_id].verdict == verdict, row_id
    assert rows["4.4.10"].rejects_session  # "the handle rejected, so the next `decide` says `fresh`"
    assert "`probe_first=False` (`probeFirst: false`)" in step
    assert "probe_first" in inspect.signature(Runner.recover).parameters
    assert (
        "probeFirst?: boolean" in (ROOT / "sdk" / "typescript" / "src" / "harness" / "recover.ts").read_text()
    )
    # The examples it names, and the tests that run them both ways with the real CLIs.
    python_test = (ROOT / "tests" / "integration" / "test_harness_real_clis.py").read_text()
    typescript_test = (ROOT / "sdk" / "typescript" / "test" / "codex-runner.test.ts").read_text()
    assert "(../sdk/python/examples/claude_code_runner.py)" in step and "EXAMPLE = ROOT" in python_test
    assert (
        "(../sdk/typescript/examples/codex_runner.ts)" in step
        and 'examples", "codex_runner.js' in typescript_test
    )
    assert python_test.count('run_example(stack, tmp_path, "--remote-sessions")') == 1
    assert python_test.count("run_example(stack, tmp_path)") == 1
    assert typescript_test.count("runExample(true)") == 1 and typescript_test.count("runExample(false)") == 1
