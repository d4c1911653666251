"""Compatibility components from a shell (contract 9.11): a file of the components' values,
digested here as a runner's adapter digests them (`continuity_runner.harness.compatibility`), so
that only digests and the generation they make are sent; and the names a reply gives, shown."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from continuity.cli.exits import EXIT_BAD_INPUT, Failure
from shared.contract.components import COMPONENT_NAMES

FILE_HELP = (
    "a JSON file of the components' values, {name: value} (names: "
    + ", ".join(COMPONENT_NAMES)
    + "; mcp_servers and plugins are lists): digested here, only the digests are sent"
)


def components_option(parser: argparse.ArgumentParser, help_text: str = FILE_HELP) -> None:
    parser.add_argument("--components", metavar="FILE", default=None, help=help_text)


def read(path: str) -> dict[str, str]:
    """The digests of the components in the file `path`, `{name: digest}`."""
    from continuity_runner.harness.compatibility import Components  # the SDK's, as runners use

    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, ValueError) as exc:
        raise Failure(EXIT_BAD_INPUT, "invalid_field", f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(values, dict) or not values:
        raise Failure(EXIT_BAD_INPUT, "invalid_field", f"{path}: expected an object of component values")
    try:
        return Components.from_mapping(values).digests()
    except (TypeError, ValueError) as exc:
        raise Failure(EXIT_BAD_INPUT, "invalid_field", f"{path}: {exc}") from None


def on_the_wire(path: str | None, generation: str | None) -> tuple[dict[str, str] | None, str | None]:
    """The digests of `--components` and the generation to send: theirs when none was given; a
    given one that is not theirs is refused before anything is sent."""
    if path is None:
        return None, generation
    from continuity_runner.harness.compatibility import generation_of

    digests = read(path)
    made = generation_of(digests)
    if generation is not None and generation != made:
        raise Failure(
            EXIT_BAD_INPUT, "invalid_field", "the generation given is not the one the components make"
        )
    return digests, made


def names(found: Sequence[str] | None) -> str:
    return ", ".join(found) if found else "-"
