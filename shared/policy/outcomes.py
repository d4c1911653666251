"""A run's decisions judged by what followed them (contract 4.6), as pure functions of its audit
trail: the policy judged by outcomes, for `continuity.runs.stats` and a replay's `results`.

A decision is one of the trail's entries that told the runner what to do: the classifier's
table (kind `decision`, with its explanation), the archiver's after an archive request (its row
is the archive request's), and an operator's (`operator_resolve`, `operator_retry`; row
`operator`). Its result:

| result | when |
|---|---|
| `held` | it stopped for an operator or a reconciliation |
| `recovered` | its attempt completed a turn (an `outcome` entry of that attempt) |
| `failed` | a later attempt of the run was decided: the run failed again |
| `abandoned` | no outcome came within the bound (an `abandoned` entry of that attempt) |
| `pending` | none of these yet |

checked in that order, so a late outcome after an abandonment counts as recovered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from shared.contract.decisions import Explanation
from shared.contract.reconciliation import AuditEntry

DecisionResult = Literal["recovered", "failed", "abandoned", "held", "pending"]
RESULTS: tuple[DecisionResult, ...] = ("recovered", "failed", "abandoned", "held", "pending")
JUDGED: frozenset[str] = frozenset({"recovered", "failed", "abandoned"})
"""The results a success rate counts: the others have not been put to the test."""

HOLDING = frozenset({"operator", "reconcile"})
DECIDING_KINDS = frozenset({"decision", "operator_resolve", "operator_retry"})
"""Audit kinds whose entry is a decision sent to the runner (`decision`: a table's or the
archiver's; `operator_resolve`, `operator_retry`: an operator's `continue_fresh`)."""
OUTCOME_KIND = "outcome"
ABANDONED_KIND = "abandoned"
OPERATOR_RULE = "operator"
"""The row name of an operator's decision: no table's row made it."""
NO_CLASS = "none"


@dataclass
class Judged:
    """One decision of a run and its result."""

    attempt: int
    kind: str
    """The audit kind of the entry that made it (`decision`, or an operator's `operator_resolve`,
    `operator_retry`)."""
    action: str
    """What the runner was told (`open_replacement` after an archive, once the archiver decided)."""
    rule: str
    failure_class: str
    at: str
    """When it was decided."""
    explanation: Explanation | None
    recorded_action: str
    """The action of the entry that holds the explanation (`archive` for an archive request):
    what a replay decides again."""
    recorded_reason: str
    result: DecisionResult = "pending"
    recovery_ms: int | None = None


def judge(trail: Sequence[AuditEntry]) -> list[Judged]:
    """Every decision of one run's trail (oldest first) with its result."""
    decided: list[Judged] = []
    archives: dict[int, Judged] = {}
    outcomes: dict[int, AuditEntry] = {}
    abandoned: set[int] = set()
    for entry in trail:
        if entry.kind == OUTCOME_KIND:
            outcomes.setdefault(entry.attempt, entry)
        elif entry.kind == ABANDONED_KIND:
            abandoned.add(entry.attempt)
        elif entry.kind in DECIDING_KINDS and entry.action is not None:
            _add(entry, decided, archives)
    last_attempt = max((d.attempt for d in decided), default=0)
    for item in decided:
        item.result = _result(item, outcomes, abandoned, last_attempt)
        if item.result == "recovered":
            item.recovery_ms = outcomes[item.attempt].recovery_ms
    return decided


def _add(entry: AuditEntry, decided: list[Judged], archives: dict[int, Judged]) -> None:
    action = entry.action or ""
    archive = archives.get(entry.attempt)
    if entry.kind == "decision" and entry.explanation is None and archive is not None:
        # The archiver's decision after the archive request of this attempt: the request's row.
        archive.action = action
        archives.pop(entry.attempt)
        return
    explanation = entry.explanation
    item = Judged(
        attempt=entry.attempt,
        kind=entry.kind,
        action=action,
        rule=explanation.rule if explanation is not None else OPERATOR_RULE,
        failure_class=explanation.failure_class if explanation is not None else NO_CLASS,
        at=entry.at,
        explanation=explanation,
        recorded_action=action,
        recorded_reason=entry.reason or "",
    )
    if action == "archive":
        archives[entry.attempt] = item  # the runner is told once the archiver decides
    decided.append(item)


def _result(
    item: Judged, outcomes: dict[int, AuditEntry], abandoned: set[int], last_attempt: int
) -> DecisionResult:
    if item.action in HOLDING:
        return "held"
    if item.attempt in outcomes and item.action != "archive":
        return "recovered"
    if item.attempt < last_attempt:
        return "failed"
    if item.attempt in abandoned:
        return "abandoned"
    return "pending"


# Statistics -------------------------------------------------------------------------------------


GroupKey = tuple[str, str, str, str, str]
"""(rule, action, failure class, harness, harness version)."""


@dataclass
class Group:
    """What the decisions of one row, class and harness led to."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESULTS, 0))
    recovery_ms: list[int] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)

    @property
    def decisions(self) -> int:
        return sum(self.counts.values())

    @property
    def success_rate(self) -> float | None:
        judged = sum(self.counts[r] for r in JUDGED)
        return self.counts["recovered"] / judged if judged else None


@dataclass
class Tally:
    """Decisions grouped by row, class and harness, and each row's points over time."""

    bucket_s: float
    groups: dict[GroupKey, Group] = field(default_factory=dict)
    series: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    """rule -> bucket number -> [recovered, judged]."""

    def count(self, item: Judged, harness: str, harness_version: str, decided_epoch: float) -> None:
        """Count one judged decision of a run of `harness`, decided at `decided_epoch`."""
        key = (item.rule, item.action, item.failure_class, harness, harness_version)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group()
        group.counts[item.result] += 1
        if item.result == "recovered":
            if item.recovery_ms is not None:
                group.recovery_ms.append(item.recovery_ms)
            group.attempts.append(item.attempt)
        if item.result in JUDGED:
            point = self.series.setdefault(item.rule, {}).setdefault(
                int(decided_epoch // self.bucket_s), [0, 0]
            )
            point[0] += item.result == "recovered"
            point[1] += 1


def quantile(values: Sequence[int], q: float) -> float | None:
    """The `q` quantile of `values` (nearest rank), None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return float(ordered[rank - 1])
