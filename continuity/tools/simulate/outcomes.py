"""The truth about outcomes, and the services' judgment of it (contract 4.6).

After each decision a simulated runner knows what followed: the decided attempt's session
completed its turn (it drew a success, with its scenario's `success_probability`, and sent
`turn_completed`), the run failed again (it drew a failure and sent the next `resume_failed`),
the run stopped for an operator or a reconciliation, or nothing followed. `Truth` counts these
per scenario and per policy row, as the runners decided them; `compare` holds them against the
rows of `continuity.runs.stats` for the same decisions. The two must agree exactly: the services
see every event the runners sent. How far both are from each scenario's configured probability
is sampling alone.

Pure bookkeeping, no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from continuity_runner import Decision, HarnessInfo

from continuity.tools.simulate.scenarios import SCENARIOS

Followed = Literal["recovered", "failed", "held", "pending"]
"""What followed a decision, as its runner knows it (the services' `abandoned` needs an hour's
silence, which no simulation waits for)."""
FOLLOWED: tuple[Followed, ...] = ("recovered", "failed", "held", "pending")

RowKey = tuple[str, str, str, str, str]
"""(rule, action, failure class, harness, harness version): a row of `continuity.runs.stats`."""

OPERATOR_RULE = "operator"
"""The row of an operator's decision (`continue_fresh` after a retry or a resolution)."""
NO_CLASS = "none"
UNKNOWN = "unknown"


def row_key(d: Decision, harness: HarnessInfo | None, archived: tuple[str, str] | None = None) -> RowKey:
    """The `continuity.runs.stats` row a decision is counted in: its policy row and class, and
    the harness the run named. An operator's decision (`continue_fresh`) has row `operator` and
    class `none`; the archiver's decision after an archive request (`archived`: that request's
    row and class) is counted in the request's row."""
    if d.action == "continue_fresh" and d.rule is None:
        rule, failure_class = OPERATOR_RULE, NO_CLASS
    elif d.rule is None and archived is not None:
        rule, failure_class = archived
    else:
        rule, failure_class = d.rule or OPERATOR_RULE, d.failure_class or NO_CLASS
    name = harness.name if harness is not None else UNKNOWN
    version = harness.version if harness is not None and harness.version else UNKNOWN
    return (rule, d.action, failure_class, name, version)


def rate(recovered: int, judged: int) -> float | None:
    return recovered / judged if judged else None


@dataclass
class Truth:
    """What followed every decision the runners received, by scenario and row."""

    counts: dict[tuple[str, RowKey], Counter[str]] = field(default_factory=dict)

    def add(self, scenario: str, key: RowKey, followed: Followed) -> None:
        self.counts.setdefault((scenario, key), Counter())[followed] += 1

    def by_row(self) -> dict[RowKey, Counter[str]]:
        rows: dict[RowKey, Counter[str]] = {}
        for (_, key), counts in self.counts.items():
            rows.setdefault(key, Counter()).update(counts)
        return rows

    def by_scenario(self) -> dict[str, Counter[str]]:
        scenarios: dict[str, Counter[str]] = {}
        for (name, _), counts in self.counts.items():
            scenarios.setdefault(name, Counter()).update(counts)
        return scenarios

    def scenario_of(self) -> dict[RowKey, set[str]]:
        owners: dict[RowKey, set[str]] = {}
        for name, key in self.counts:
            owners.setdefault(key, set()).add(name)
        return owners

    @property
    def decisions(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())


@dataclass(frozen=True, slots=True)
class ServerRow:
    """The counts of one `continuity.runs.stats` row (`RowStats`), as plain numbers."""

    recovered: int
    failed: int
    abandoned: int
    held: int
    pending: int

    @property
    def judged(self) -> int:
        return self.recovered + self.failed + self.abandoned


@dataclass(frozen=True, slots=True)
class RowComparison:
    key: RowKey
    scenarios: tuple[str, ...]
    runners: dict[str, int]
    """recovered, failed, held, pending, as the runners know them."""
    server: ServerRow | None
    """None: `continuity.runs.stats` has no such row."""

    @property
    def agrees(self) -> bool:
        s = self.server
        if s is None:
            return False
        return (s.recovered, s.failed, s.abandoned, s.held, s.pending) == (
            self.runners["recovered"],
            self.runners["failed"],
            0,
            self.runners["held"],
            self.runners["pending"],
        )


@dataclass(frozen=True, slots=True)
class ScenarioRate:
    """One scenario's success rate: configured, drawn by its runners, and judged by the services."""

    scenario: str
    probability: float
    judged: int
    """Decisions followed by a completed turn or another failure, as the runners know them."""
    recovered: int
    server_judged: int
    server_recovered: int

    @property
    def drawn(self) -> float | None:
        return rate(self.recovered, self.judged)

    @property
    def judged_by_server(self) -> float | None:
        return rate(self.server_recovered, self.server_judged)

    @property
    def points_off(self) -> float | None:
        """The services' success rate minus the configured probability, in percentage points."""
        r = self.judged_by_server
        return None if r is None else 100.0 * (r - self.probability)

    @property
    def standard_error(self) -> float | None:
        """sqrt(p(1-p)/n) of the configured probability over the judged decisions, in points."""
        if not self.judged:
            return None
        return 100.0 * math.sqrt(self.probability * (1 - self.probability) / self.judged)


@dataclass(frozen=True, slots=True)
class Comparison:
    rows: list[RowComparison]
    scenarios: list[ScenarioRate]

    @property
    def disagreements(self) -> list[RowComparison]:
        return [r for r in self.rows if not r.agrees]


def compare(truth: Truth, server: dict[RowKey, ServerRow]) -> Comparison:
    """Every row either side knows, side by side, and each decided scenario's rates (a row's
    scenario is the one whose harness it names: each scenario names its own)."""
    owners = truth.scenario_of()
    mine = truth.by_row()
    rows = [
        RowComparison(
            key,
            tuple(sorted(owners.get(key, ()))),
            {f: mine.get(key, Counter())[f] for f in FOLLOWED},
            server.get(key),
        )
        for key in sorted(set(mine) | set(server))
    ]
    by_harness = {s.harness.name: s.name for s in SCENARIOS.values() if s.harness is not None}
    server_counts: dict[str, list[int]] = {}
    for key, row in server.items():
        name = by_harness.get(key[3])
        if name is not None:
            counts = server_counts.setdefault(name, [0, 0])
            counts[0] += row.recovered
            counts[1] += row.judged
    scenarios: list[ScenarioRate] = []
    drawn = truth.by_scenario()
    for name in _ordered(set(drawn) | set(server_counts)):
        p = SCENARIOS[name].success_probability
        if p is None:
            continue
        c = drawn.get(name, Counter())
        got = server_counts.get(name, [0, 0])
        scenarios.append(ScenarioRate(name, p, c["recovered"] + c["failed"], c["recovered"], got[1], got[0]))
    return Comparison(rows, scenarios)


def _ordered(names: Iterable[str]) -> list[str]:
    wanted = set(names)
    return [n for n in SCENARIOS if n in wanted]
