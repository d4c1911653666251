"""Recorded decisions decided again under a candidate policy: what would change, and where.

A recorded decision is its action and reason and the explanation recorded with it (9.11): the
explanation holds every input the recovery table reads, so deciding it again needs nothing
else. Replaying the policy that made the decisions finds no change (tests/unit/test_policy.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from shared.contract.decisions import Explanation
from shared.contract.policy import ReplayChange

from .policy import Policy
from .recovery import decide_row, facts_of


@dataclass(frozen=True, slots=True)
class Recorded:
    run_id: str
    action: str
    """The recorded action (`archive` for a request to archive and replace)."""
    reason: str
    explanation: Explanation
    result: str | None = None
    """What followed it under the running policy (`shared.policy.outcomes`), when known."""


@dataclass
class Outcome:
    replayed: int = 0
    unchanged: int = 0
    changes: dict[tuple[str, str, str, str, str, str], ReplayChange] = field(default_factory=dict)


def replay(
    recorded: Iterable[Recorded], candidate: Policy, examples: int = 10, into: Outcome | None = None
) -> Outcome:
    """Decide every recorded decision again under `candidate`; grouped by (action, reason)
    before and after, with the rows on both sides and up to `examples` run ids per change."""
    out = into if into is not None else Outcome()
    rows = candidate.recovery
    for item in recorded:
        out.replayed += 1
        row = decide_row(rows, facts_of(item.explanation))
        if row is None:  # a loaded policy is total; counted as a change to nothing if not
            action, reason, rule = "none", "none", "none"
        else:
            action, reason, rule = row.verdict, row.reason, row.id
        if (action, reason) == (item.action, item.reason):
            out.unchanged += 1
            continue
        key = (item.action, item.reason, action, reason, item.explanation.rule, rule)
        change = out.changes.get(key)
        if change is None:
            change = out.changes[key] = ReplayChange(
                action=item.action,
                reason=item.reason,
                candidate_action=action,
                candidate_reason=reason,
                rule=item.explanation.rule,
                candidate_rule=rule,
                count=0,
                runs=[],
            )
        change.count += 1
        if item.result is not None:
            change.results[item.result] = change.results.get(item.result, 0) + 1
        if len(change.runs) < examples:
            change.runs.append(item.run_id)
    return out


def ordered(outcome: Outcome) -> list[ReplayChange]:
    """The changes, largest first."""
    return sorted(outcome.changes.values(), key=lambda c: (-c.count, c.rule, c.candidate_rule))
