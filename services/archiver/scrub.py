"""Hiding the session's compatibility generation in a runner's archive output.

No detail may repeat a generation value (contract section 1), and a runner's output is free
text: it can print the generation it runs with, which is the one the session record stores.
So before the output is redacted and cut (`shared.contract.redaction.bounded_detail`), every
stored generation value (`shared.records.session.every_generation`) is replaced with
`[REDACTED]`, in any letter case, and so is a prefix of one that ends the output (a runner that
cut its own output in the middle of the value).
"""

from __future__ import annotations

import re
from collections.abc import Collection

from shared.contract.redaction import REDACTED

MIN_TRAILING_PREFIX = 8
"""A prefix of a generation this long or longer that ends the output is hidden too; shorter
ones are too common as ordinary text to tell apart."""


def scrub(text: str, values: Collection[str]) -> str:
    """`text` with every one of `values` replaced with `[REDACTED]`."""
    # Longest first, so that a value containing another is hidden whole.
    for value in sorted(values, key=len, reverse=True):
        text = re.sub(re.escape(value), REDACTED, text, flags=re.IGNORECASE)
        text = _scrub_trailing_prefix(text, value)
    return text


def _scrub_trailing_prefix(text: str, value: str) -> str:
    folded = value.lower()
    for size in range(min(len(value) - 1, len(text)), min(len(value), MIN_TRAILING_PREFIX) - 1, -1):
        if text[-size:].lower() == folded[:size]:
            return text[:-size] + REDACTED
    return text
