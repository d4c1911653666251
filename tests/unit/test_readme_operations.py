"""The README's operations section and service table say what the code has: every command they
name exists with the options they name, and every durable consumer a service creates is in the
table."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from continuity.cli.main import build_parser
from services import registry
from shared.contract import subjects

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
OPERATIONS = README.split("## Operations", 1)[1].split("\n## ", 1)[0]
SERVICES_TABLE = README.split("| service | owns | consumes | produces |", 1)[1].split("\n\n", 1)[0]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _choices(parser: argparse.ArgumentParser) -> dict[str, object]:
    """A command's positional choices (`continuity serve <service>`)."""
    return {c: c for a in parser._actions if not a.option_strings and a.choices for c in a.choices}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


# `continuity <group> <a>|<b>` and `continuity <command>` as the section writes them.
NAMED = re.findall(r"`continuity\s+([a-z-]+)(?:\s+([a-z|-]+))?", OPERATIONS)


def test_the_operations_section_names_commands() -> None:
    groups = {group for group, _ in NAMED}
    assert {"reconciliations", "runs", "watch", "dead", "streams", "memory", "runners"} <= groups


@pytest.mark.parametrize(("group", "commands"), NAMED, ids=lambda v: v or "-")
def test_every_command_the_section_names_exists(group: str, commands: str) -> None:
    top = _subcommands(build_parser())
    assert group in top, group
    below = _subcommands(top[group]) or _choices(top[group])
    for name in filter(None, commands.split("|")):
        if name.startswith("-"):
            continue
        assert name in below, f"continuity {group} {name}"


@pytest.mark.parametrize(
    ("path", "options"),
    [
        (["runs", "list"], {"--older-than", "--cursor"}),
        (["runs", "retry"], {"--status", "--dry-run", "--max", "--yes"}),
        (["watch"], {"--since"}),
        (["memory", "estimate"], {"--runs-per-day"}),
        (["runners", "add"], {"--conf-dir", "--create-consumer"}),
    ],
)
def test_the_options_the_section_names_exist(path: list[str], options: set[str]) -> None:
    parser = build_parser()
    for name in path:
        parser = _subcommands(parser)[name]
    assert options <= _options(parser)
    assert all(option in OPERATIONS for option in options)


def test_the_service_table_names_every_durable_consumer_and_the_runs_list() -> None:
    for spec in registry.durable_consumers(1, 30.0):
        # By its name, its subject or its stream.
        names = {spec.durable, spec.config.filter_subject, spec.stream}
        assert any(f"`{name}`" in SERVICES_TABLE for name in names), spec.durable
    assert f"`{subjects.RUNS_INDEX_CONSUMER}`" in SERVICES_TABLE
    assert f"`{subjects.RUNS_LIST}`" in SERVICES_TABLE
    assert "| [console](services/console) |" in SERVICES_TABLE


def test_the_invariant_count_the_readme_gives_is_the_policy_s() -> None:
    from shared.policy.invariants import INVARIANTS

    words = {5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten", 11: "eleven"}
    assert f"one of {words[len(INVARIANTS)]} invariants" in " ".join(OPERATIONS.split())


def test_the_harness_paragraph_names_every_harness_and_class_and_a_real_command() -> None:
    from continuity_runner import harness

    paragraph = " ".join(README.split("**Harness adapters**", 1)[1].split("\n\n", 1)[0].split())
    titles = {
        "claude-code": "Claude Code",
        "codex": "Codex (CLI",
        "codex-app-server": "app-server",
        "gemini-cli": "Gemini CLI",
        "opencode": "OpenCode",
        "claude-agent-sdk": "Claude Agent SDK",
        "openai-agents": "OpenAI Agents SDK",
        "acp": "ACP agents",
    }
    assert set(titles) == set(harness.names())
    for title in titles.values():
        assert title in paragraph, title
    for cls in ("native_session_missing", "context_overflow", "transcript_corrupt", "session_busy"):
        assert f"`{cls}`" in paragraph
    classify = _subcommands(_subcommands(build_parser())["harness"])["classify"]
    assert "--harness" in _options(classify)
