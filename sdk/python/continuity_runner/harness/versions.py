"""Version ranges of the harness table (`capabilities[].versions`).

A range is space-separated comparators, each `>=`, `>`, `<=`, `<` or `=` and a numeric
`MAJOR.MINOR.PATCH` (`>=1.2.0 <2.0.0`); the empty string is every version. Versions compare
numerically part by part; a pre-release or build suffix (`2.1.0-beta.1`, `2.1.0+abc`) is ignored,
so `2.1.0-beta.1` is `2.1.0`. The TypeScript SDK reads ranges alike (src/harness/versions.ts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Operator = Literal[">=", ">", "<=", "<", "="]
Version = tuple[int, int, int]

_COMPARATOR = re.compile(r"(>=|<=|>|<|=)(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
_VERSION = re.compile(r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?(?:[-+].*)?", re.DOTALL)
"""A version as harnesses print it: `2.1.332`, `v0.61.0`, `1.18.33-beta.2`; missing parts are 0."""


@dataclass(frozen=True)
class Comparator:
    op: Operator
    version: Version


def parse_range(text: str) -> list[Comparator]:
    """The comparators of `text`; `ValueError` naming the one that is not."""
    if not isinstance(text, str):
        raise ValueError("a version range is a string")
    parts = [part for part in text.split(" ") if part]
    if text != " ".join(parts):
        raise ValueError(f"version range {text!r}: comparators are separated by one space")
    comparators = []
    for part in parts:
        m = _COMPARATOR.fullmatch(part)
        if m is None:
            raise ValueError(f"version range {text!r}: {part!r} is not a comparator")
        op: Operator = m.group(1)  # type: ignore[assignment]
        comparators.append(Comparator(op, (int(m.group(2)), int(m.group(3)), int(m.group(4)))))
    return comparators


def parse_version(text: str) -> Version | None:
    """`text` as three numbers, or None when it is not a version."""
    if not isinstance(text, str):
        return None
    m = _VERSION.fullmatch(text.strip())
    if m is None:
        return None
    major, minor, patch = (int(p) if p is not None else 0 for p in m.groups())
    return (major, minor, patch)


def satisfies(version: str, range_: str) -> bool:
    """Whether `version` is in `range_` (False for a string that is not a version)."""
    v = parse_version(version)
    if v is None:
        return False
    for c in parse_range(range_):
        if c.op == ">=" and not v >= c.version:
            return False
        if c.op == ">" and not v > c.version:
            return False
        if c.op == "<=" and not v <= c.version:
            return False
        if c.op == "<" and not v < c.version:
            return False
        if c.op == "=" and v != c.version:
            return False
    return True
