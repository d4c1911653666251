"""The outcomes page: the running policy judged by what followed its decisions
(`continuity.runs.stats`, contract 4.6), as `continuity runs stats` prints it.

Its query string holds a window (`since`: one of `SINCE`), a runner and a tenant, each checked
against the contract's own types before anything is sent. Each policy row's success rate over
time is drawn here, on the server, as a small inline SVG from the reply's `series` points alone
(a bucket's start, its recovered and its judged decisions): no script draws it, and no run id is
ever part of a chart."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
from markupsafe import Markup, escape

from services.console.runs_query import RUN_STATUSES, QueryError
from shared.contract.runs import RowStats, RunsStatsReply, RunsStatsRequest, SeriesPoint

SINCE: dict[str, tuple[float, float]] = {
    "1h": (3_600.0, 300.0),
    "24h": (86_400.0, 3_600.0),
    "7d": (604_800.0, 21_600.0),
    "30d": (2_592_000.0, 86_400.0),
}
"""The windows offered: (since_s, bucket_s), so each chart has 12 to 30 points."""
SINCE_WORDS = {
    "1h": "the last hour",
    "24h": "the last 24 hours",
    "7d": "the last 7 days",
    "30d": "the last 30 days",
}
BUCKET_WORDS = {300.0: "5 minutes", 3_600.0: "hour", 21_600.0: "6 hours", 86_400.0: "day"}
DEFAULT_SINCE = "24h"
ATTENTION = frozenset({"abandoned"})
"""Statuses the page highlights: runs no session recovered in time after their decision."""

_INVALID = {
    "runner_id": "A runner id is 1 to 64 of A-Z a-z 0-9 _ -.",
    "tenant": "A tenant is 1 to 128 of A-Z a-z 0-9 . _ : -.",
}
_SINCE_MESSAGE = "Since is one of " + ", ".join(SINCE) + "."

CHART_WIDTH = 320
CHART_HEIGHT = 72
CHART_PAD = 6
DOT_RADIUS = 3.5
SVG_NS = "http://www.w3.org/2000/svg"


@dataclass(frozen=True)
class OutcomesQuery:
    since: str
    """As typed (trimmed): a key of `SINCE` once `request` accepted it."""
    runner_id: str
    tenant: str

    @property
    def since_s(self) -> float:
        return SINCE.get(self.since, SINCE[DEFAULT_SINCE])[0]

    @property
    def bucket_s(self) -> float:
        return SINCE.get(self.since, SINCE[DEFAULT_SINCE])[1]

    def request(self) -> RunsStatsRequest:
        """The request it asks, or `QueryError` saying which field is wrong (never its value)."""
        if self.since not in SINCE:
            raise QueryError(_SINCE_MESSAGE)
        fields: dict[str, Any] = {"since_s": self.since_s, "bucket_s": self.bucket_s}
        for name in ("runner_id", "tenant"):
            value = getattr(self, name)
            if not value:
                continue
            try:
                msgspec.convert({name: value}, RunsStatsRequest)
            except msgspec.ValidationError:
                raise QueryError(_INVALID[name]) from None
            fields[name] = value
        return msgspec.convert(fields, RunsStatsRequest)


def parse(query: Mapping[str, str]) -> OutcomesQuery:
    """The page's query as typed; `OutcomesQuery.request` checks it."""
    since = query.get("since", "").strip() or DEFAULT_SINCE
    return OutcomesQuery(since, query.get("runner_id", "").strip(), query.get("tenant", "").strip())


# The chart ----------------------------------------------------------------------------------


def epoch(rfc3339: str) -> float | None:
    """An RFC 3339 time as seconds since 1970, or None when it cannot be read."""
    try:
        then = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return None
    if then.tzinfo is None:
        return None
    return then.timestamp()


def _num(value: float) -> str:
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


@dataclass(frozen=True)
class Chart:
    """One row's success rate per bucket, as SVG geometry in a `CHART_WIDTH` x `CHART_HEIGHT`
    box: a line through the buckets that judged a decision, broken where a bucket judged none
    (or is missing), and a dot for a bucket with judged neighbours on neither side."""

    path: str
    """SVG path data: one `M` (a new line) per run of judged buckets, `L` to each next one."""
    dots: tuple[tuple[float, float], ...]
    judged: int
    recovered: int
    buckets: int
    """The buckets that judged at least one decision."""

    @property
    def empty(self) -> bool:
        return self.buckets == 0

    def svg(self, label: str) -> Markup:
        """The chart as inline SVG. `label` (its accessible name and tooltip) is escaped; the
        rest is numbers the chart computed. Styled by classes of the console's stylesheet."""
        name = escape(label)
        right = CHART_WIDTH - CHART_PAD
        axes = [
            f'<line class="chart-axis" x1="{CHART_PAD}" y1="{_num(y)}" x2="{right}" y2="{_num(y)}"/>'
            for y in (_y(1.0), _y(0.0))
        ]
        parts = [
            f'<svg xmlns="{SVG_NS}" class="chart" viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" '
            f'width="{CHART_WIDTH}" height="{CHART_HEIGHT}" role="img" aria-label="{name}">',
            f"<title>{name}</title>",
            *axes,
        ]
        if self.path:
            parts.append(f'<path class="chart-line" d="{self.path}"/>')
        for x, y in self.dots:
            parts.append(f'<circle class="chart-dot" cx="{_num(x)}" cy="{_num(y)}" r="{DOT_RADIUS}"/>')
        parts.append("</svg>")
        return Markup("".join(parts))


def _y(rate: float) -> float:
    return CHART_PAD + (1.0 - rate) * (CHART_HEIGHT - 2 * CHART_PAD)


def chart(points: Iterable[SeriesPoint], start: float, end: float, bucket_s: float) -> Chart:
    """The chart of `points` over the window [`start`, `end`] (seconds since 1970), one point
    per bucket of `bucket_s`. A point's rate is recovered / judged, drawn at its bucket's middle;
    a point with judged 0, or with a time that cannot be read, is a gap, and so is a missing
    bucket between two judged ones. The window widens to take in any point outside it."""
    timed = sorted((t, p) for p in points if (t := epoch(p.at)) is not None)
    judged = [(t, p) for t, p in timed if p.judged > 0]
    if not judged:
        return Chart("", (), 0, 0, 0)
    lo = min(start, timed[0][0])
    hi = max(end, timed[-1][0] + bucket_s, lo + bucket_s)
    inner = CHART_WIDTH - 2 * CHART_PAD

    def x(t: float) -> float:
        return CHART_PAD + (t + bucket_s / 2 - lo) / (hi - lo) * inner

    lines: list[list[tuple[float, float]]] = []
    previous: float | None = None
    for t, p in timed:
        if p.judged <= 0:
            previous = None  # a bucket with nothing judged: the line stops here
            continue
        rate = min(max(p.recovered / p.judged, 0.0), 1.0)
        at = (x(t), _y(rate))
        if previous is None or t - previous > bucket_s * 1.5:
            lines.append([at])
        else:
            lines[-1].append(at)
        previous = t
    path = " ".join(
        "M" + " L".join(f"{_num(px)} {_num(py)}" for px, py in line) for line in lines if len(line) > 1
    )
    dots = tuple(line[0] for line in lines if len(line) == 1)
    return Chart(
        path,
        dots,
        sum(p.judged for _, p in judged),
        sum(p.recovered for _, p in judged),
        len(judged),
    )


# What the page shows ------------------------------------------------------------------------


def percent(rate: float | None) -> str:
    if rate is None or not math.isfinite(rate):
        return "-"
    return f"{rate * 100:.0f}%"


def seconds(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.1f} s"


def recovery(ms: int | None) -> str:
    """A run's `recovery_ms` as seconds; "" when it has none."""
    return "" if ms is None else f"{ms / 1000:.1f} s"


def mean(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.2f}"


@dataclass(frozen=True)
class RowChart:
    rule: str
    chart: Chart
    label: str


def _statuses(counts: Mapping[str, int]) -> list[tuple[str, int, bool]]:
    """Every run status with its count (0 when none), the contract's order, then any other the
    service named; each with whether the page highlights it."""
    known = [(s, int(counts.get(s, 0))) for s in RUN_STATUSES]
    others = sorted((s, int(n)) for s, n in counts.items() if s not in RUN_STATUSES)
    return [(s, n, s in ATTENTION and n > 0) for s, n in known + others]


def _rows(rows: Sequence[RowStats]) -> list[RowStats]:
    return sorted(rows, key=lambda r: (r.rule, r.failure_class, r.harness, r.harness_version, r.action))


def page_values(
    query: OutcomesQuery, reply: RunsStatsReply | None = None, error: str | None = None
) -> dict[str, Any]:
    """The values `outcomes.html` renders: the form as typed, and the reply's counts, rows and
    one chart per row of its series (none without a reply)."""
    values: dict[str, Any] = {
        "query": query,
        "choices": [(key, SINCE_WORDS[key]) for key in SINCE],
        "window": SINCE_WORDS.get(query.since, SINCE_WORDS[DEFAULT_SINCE]),
        "bucket": BUCKET_WORDS.get(query.bucket_s, f"{query.bucket_s:g} s"),
        "error": error,
        "reply": reply,
        "statuses": [],
        "abandoned": 0,
        "rows": [],
        "charts": [],
        "percent": percent,
        "seconds": seconds,
        "mean": mean,
    }
    if reply is None:
        return values
    start = epoch(reply.since)
    if start is None:  # a since that cannot be read: the window starts at the first point
        times = [t for s in reply.series for p in s.points if (t := epoch(p.at)) is not None]
        start = min(times, default=0.0)
    end = start + query.since_s
    charts = []
    for series in sorted(reply.series, key=lambda s: s.rule):
        drawn = chart(series.points, start, end, query.bucket_s)
        label = (
            f"Row {series.rule}: success rate per {values['bucket']}, "
            f"{drawn.recovered} of {drawn.judged} judged decisions recovered"
        )
        charts.append(RowChart(series.rule, drawn, label))
    values.update(
        statuses=_statuses(reply.statuses),
        abandoned=int(reply.statuses.get("abandoned", 0)),
        rows=_rows(reply.rows),
        charts=charts,
    )
    return values
