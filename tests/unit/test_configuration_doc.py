"""docs/configuration.md names every variable Continuity reads, as it claims to: each name
`known_variables()` returns is in its table, but for the console's own settings, which are in
the page it links, docs/console.md; and where a row gives one variable a number for its
default, that is the default the services start with."""

from __future__ import annotations

import re
from pathlib import Path

from services.registry import known_variables
from shared.platform.config import Config

DOCS = Path(__file__).resolve().parents[2] / "docs"
CONFIGURATION = (DOCS / "configuration.md").read_text()
CONSOLE = (DOCS / "console.md").read_text()
CONSOLE_PREFIX = "CONTINUITY_CONSOLE_"


def missing(variables: frozenset[str], configuration: str, console: str) -> list[str]:
    """The variables neither page names (each in backticks, whole: no `_SUFFIX` shorthand)."""
    return sorted(
        v for v in variables if f"`{v}`" not in (console if v.startswith(CONSOLE_PREFIX) else configuration)
    )


def test_every_variable_is_in_the_configuration_page_or_the_console_page_it_links() -> None:
    variables = known_variables()
    assert {
        "CONTINUITY_OUTCOME_WAIT_S",
        "CONTINUITY_RUNNER_STORED_RUNS",
        "CONTINUITY_CONSOLE_PORT",
    } <= variables
    assert missing(variables, CONFIGURATION, CONSOLE) == []
    assert "(console.md#configuration)" in CONFIGURATION
    assert "\n## Configuration\n" in CONSOLE


def test_a_variable_missing_from_the_pages_is_found() -> None:
    planted = frozenset({"CONTINUITY_NATS_TLS_CERT", "CONTINUITY_CONSOLE_PORT"})
    shorthand = "| `CONTINUITY_NATS_TLS_CA` / `_CERT` / `_KEY` |"
    assert missing(planted, shorthand, "| `CONTINUITY_CONSOLE_HOST` / `_PORT` |") == sorted(planted)


ROW = re.compile(r"^\| `(CONTINUITY_[A-Z0-9_]+)` \| `([0-9.]+)` \|", re.MULTILINE)


def test_the_numeric_defaults_the_page_gives_are_the_services() -> None:
    rows = ROW.findall(CONFIGURATION)
    assert len(rows) >= 15
    defaults = Config()
    for variable, default in rows:
        value = getattr(defaults, variable.removeprefix("CONTINUITY_").lower())
        assert float(default) == value, variable
