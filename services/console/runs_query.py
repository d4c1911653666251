"""The runs page's query string: the filters of `continuity runs list` (status, runner, tenant,
reason, older than, newer than), a page size and the index's opaque cursor, checked against the
contract's own types before anything is sent, and turned back into the links of the page.

A link carries only these fields: the cursor is the index's position of a page's last run
(`continuity.runs.list`), never a generation or a secret."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args
from urllib.parse import urlencode

import msgspec

from shared.contract.runs import RunsListRequest
from shared.contract.times import rfc3339_from_epoch
from shared.contract.types import DecisionReason, RunStatus

RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
REASONS: tuple[str, ...] = get_args(DecisionReason)
FILTERS = ("status", "runner_id", "tenant", "reason", "older_than", "newer_than")
PAGE_RUNS = 50
"""Runs per page unless the query asks for another number (1 to 1000, the contract's limit)."""
MAX_PAGE_RUNS = 1000
CURSOR_MESSAGE = "That page link is not valid any more; start again from the first page."

# What a value the contract refuses means for the person who typed it (never the value itself).
_INVALID = {
    "status": "Unknown status.",
    "runner_id": "A runner id is 1 to 64 of A-Z a-z 0-9 _ -.",
    "tenant": "A tenant is 1 to 128 of A-Z a-z 0-9 . _ : -.",
    "reason": "Unknown reason.",
    "cursor": CURSOR_MESSAGE,
}
_AGE = "Ages are a number and a unit: 30s, 15m, 2h or 3d."
_DURATION = re.compile(r"(\d{1,6})([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class QueryError(ValueError):
    """A query the page cannot ask: `message` is for people and repeats no value."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def age_seconds(text: str) -> int | None:
    """`30s`, `15m`, `2h`, `3d` as seconds; None for anything else."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        return None
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def _ago(seconds: int, now: float) -> str:
    # An age reaching before 1970 means "since the beginning": the contract's times start there.
    return rfc3339_from_epoch(max(now - seconds, 0.0))


@dataclass(frozen=True)
class RunsQuery:
    filters: dict[str, str]
    """Every filter as typed (trimmed; "" when not given), to fill the form again."""
    limit: int
    cursor: str | None

    def request(self, now: float | None = None) -> RunsListRequest:
        f = self.filters
        at = time.time() if now is None else now
        older, newer = age_seconds(f["older_than"]), age_seconds(f["newer_than"])
        fields: dict[str, Any] = {k: f[k] for k in ("status", "runner_id", "tenant", "reason") if f[k]}
        if older is not None:
            fields["updated_before"] = _ago(older, at)
        if newer is not None:
            fields["updated_after"] = _ago(newer, at)
        return msgspec.convert({**fields, "limit": self.limit, "cursor": self.cursor}, RunsListRequest)

    def link(self, cursor: str | None = None) -> str:
        """This query's page that starts at `cursor` (the first page without one)."""
        fields = [(k, v) for k, v in self.filters.items() if v]
        if self.limit != PAGE_RUNS:
            fields.append(("limit", str(self.limit)))
        if cursor:
            fields.append(("cursor", cursor))
        return "/runs?" + urlencode(fields) if fields else "/runs"


def parse(query: Mapping[str, str]) -> RunsQuery:
    filters = {name: query.get(name, "").strip() for name in FILTERS}
    cursor = query.get("cursor", "").strip() or None
    given: dict[str, Any] = {k: v for k, v in filters.items() if v and k in _INVALID}
    if cursor is not None:
        given["cursor"] = cursor
    for name, value in given.items():  # one at a time, to say which field is wrong
        try:
            msgspec.convert({name: value}, RunsListRequest)
        except msgspec.ValidationError:
            raise QueryError(_INVALID[name]) from None
    for name in ("older_than", "newer_than"):
        if filters[name] and age_seconds(filters[name]) is None:
            raise QueryError(_AGE)
    raw = query.get("limit", "").strip()
    limit = min(max(int(raw), 1), MAX_PAGE_RUNS) if raw.isdigit() and len(raw) <= 6 else PAGE_RUNS
    return RunsQuery(filters, limit, cursor)


def count_label(found: int, cap: int) -> str:
    """A count read with a limit of `cap + 1`: exact up to `cap`, `cap+` beyond."""
    return f"{cap}+" if found > cap else str(found)
