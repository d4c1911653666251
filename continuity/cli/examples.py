"""Examples at the end of a command's `--help`, given by the module that adds the command (a
group such as `continuity runs` too), and the walks over the commands (a test checks that every
help ends with examples)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator


def examples(parser: argparse.ArgumentParser, *lines: str) -> None:
    """Ends `parser`'s help with `lines`, as written (a raw epilog keeps their alignment)."""
    text = "examples:\n" + "\n".join(f"  {line}" for line in lines)
    parser.epilog = f"{parser.epilog}\n\n{text}" if parser.epilog else text
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def commands(
    parser: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command that runs something (the leaves of the sub-command tree), by path."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups and path:
        yield path, parser
    for group in groups:
        for name, child in group.choices.items():
            yield from commands(child, f"{path} {name}".strip())


def parsers(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the tree by path, the groups (`continuity`, `continuity runs`) too."""
    yield path, parser
    for group in (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)):
        for name, child in group.choices.items():
            yield from parsers(child, f"{path} {name}".strip())
