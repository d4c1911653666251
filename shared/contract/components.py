"""Compatibility components (contract 3.2, 3.3 and 9.11): the generation as the digest of its
named components' digests. The runner SDKs compute both from the components' values
(`continuity_runner.harness.compatibility`); a service checks that the digests a message carries
make the generation it carries, and compares components by name. Only names leave a service."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import get_args

from shared.contract.types import ComponentName

COMPONENT_NAMES: tuple[ComponentName, ...] = get_args(ComponentName)
"""The closed names, sorted: the order of the generation's lines."""


def generation_of(digests: Mapping[ComponentName, str]) -> str:
    """The lowercase hex SHA-256 of the `name=digest` lines, sorted by name, joined by `\\n`
    (the names and digests are the contract's: a decoded message's are)."""
    lines = "\n".join([f"{name}={digests[name]}" for name in sorted(digests)])
    return hashlib.sha256(lines.encode()).hexdigest()


def changed(saved: Mapping[ComponentName, str], ready: Mapping[ComponentName, str]) -> list[ComponentName]:
    """The names whose values differ, or that one side has and the other lacks, sorted."""
    return [name for name in COMPONENT_NAMES if saved.get(name) != ready.get(name)]
