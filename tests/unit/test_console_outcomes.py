"""The outcomes page without a service: its query checked against the contract, each row's
success rate drawn as inline SVG from series points (lines, gaps, dots, escaping, nothing
judged), and the page rendered from a `RunsStatsReply`."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from services.console.outcomes import (
    CHART_HEIGHT,
    CHART_PAD,
    CHART_WIDTH,
    DEFAULT_SINCE,
    SINCE,
    chart,
    epoch,
    page_values,
    parse,
    recovery,
)
from services.console.render import template_environment
from services.console.runs_query import QueryError
from shared.contract.runs import RowSeries, RowStats, RunsStatsReply, SeriesPoint

HOUR = 3600.0
START = "2026-12-06T00:00:00Z"
T0 = epoch(START) or 0.0
HOSTILE = '<script>alert("x")</script>&"'
INNER = CHART_WIDTH - 2 * CHART_PAD


def at(hour: int) -> str:
    return f"2026-12-06T{hour:02d}:00:00Z"


def point(hour: int, recovered: int, judged: int) -> SeriesPoint:
    return SeriesPoint(at=at(hour), recovered=recovered, judged=judged)


def x(hour: int, hours: int = 4) -> float:
    """Where the chart puts hour `hour`'s bucket in a window of `hours` hourly buckets."""
    return CHART_PAD + (hour + 0.5) / hours * INNER


def y(rate: float) -> float:
    return CHART_PAD + (1 - rate) * (CHART_HEIGHT - 2 * CHART_PAD)


def coordinates(path: str) -> list[list[tuple[float, float]]]:
    """A path's lines (each `M` starts one) as their points."""
    lines = []
    for sub in path.split("M")[1:]:
        pairs = [p.strip().split() for p in sub.split("L")]
        lines.append([(float(a), float(b)) for a, b in pairs])
    return lines


def close(found: list[list[tuple[float, float]]], expected: list[list[tuple[float, float]]]) -> bool:
    return len(found) == len(expected) and all(
        len(f) == len(e)
        and all(abs(a - c) <= 0.06 and abs(b - d) <= 0.06 for (a, b), (c, d) in zip(f, e, strict=True))
        for f, e in zip(found, expected, strict=True)
    )


# The query ------------------------------------------------------------------------------------


def test_the_window_and_the_filters_become_one_stats_request() -> None:
    req = parse({"since": "7d", "runner_id": " runner-a ", "tenant": "acme"}).request()
    assert (req.since_s, req.bucket_s) == SINCE["7d"]
    assert (req.runner_id, req.tenant) == ("runner-a", "acme")
    default = parse({}).request()
    assert (default.since_s, default.bucket_s, default.runner_id, default.tenant) == (
        *SINCE[DEFAULT_SINCE],
        None,
        None,
    )


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"since": "2y"}, "Since is one of"),
        ({"since": "<b>"}, "Since is one of"),
        ({"runner_id": "a runner"}, "A runner id is"),
        ({"runner_id": "r" * 65}, "A runner id is"),
        ({"tenant": "t/../x"}, "A tenant is"),
    ],
)
def test_a_window_or_filter_the_contract_refuses_is_named_without_its_value(
    query: dict[str, str], words: str
) -> None:
    with pytest.raises(QueryError) as refused:
        parse(query).request()
    assert refused.value.message.startswith(words)
    for value in query.values():
        assert value not in refused.value.message


# The chart ------------------------------------------------------------------------------------


def test_judged_buckets_make_one_line_at_their_success_rates() -> None:
    drawn = chart([point(0, 1, 1), point(1, 1, 2), point(2, 0, 3)], T0, T0 + 4 * HOUR, HOUR)
    assert close(coordinates(drawn.path), [[(x(0), y(1.0)), (x(1), y(0.5)), (x(2), y(0.0))]])
    assert drawn.path.startswith("M") and drawn.path.count("M") == 1
    assert (drawn.dots, drawn.judged, drawn.recovered, drawn.buckets, drawn.empty) == ((), 6, 2, 3, False)


def test_a_bucket_with_nothing_judged_breaks_the_line_and_a_lone_bucket_is_a_dot() -> None:
    points = [point(0, 1, 1), point(1, 2, 2), point(2, 0, 0), point(3, 1, 4)]
    drawn = chart(points, T0, T0 + 4 * HOUR, HOUR)
    assert close(coordinates(drawn.path), [[(x(0), y(1.0)), (x(1), y(1.0))]])
    assert close([list(drawn.dots)], [[(x(3), y(0.25))]])
    assert (drawn.judged, drawn.recovered, drawn.buckets) == (7, 4, 3)


def test_a_missing_bucket_breaks_the_line_too() -> None:
    points = [point(0, 1, 1), point(1, 1, 1), point(4, 0, 1), point(5, 1, 1)]
    drawn = chart(points, T0, T0 + 6 * HOUR, HOUR)
    assert close(
        coordinates(drawn.path),
        [[(x(0, 6), y(1.0)), (x(1, 6), y(1.0))], [(x(4, 6), y(0.0)), (x(5, 6), y(1.0))]],
    )
    assert drawn.dots == ()


def test_points_are_drawn_in_time_order_inside_the_box_whatever_their_order_and_values() -> None:
    # Out of order, one before the window, a rate above 1, a time that cannot be read.
    points = [point(3, 9, 3), point(0, 0, 2), SeriesPoint(at="not a time", recovered=1, judged=1)]
    points.append(SeriesPoint(at="2026-12-05T23:00:00Z", recovered=1, judged=2))
    drawn = chart(points, T0, T0 + 4 * HOUR, HOUR)
    lines = coordinates(drawn.path)
    assert len(lines) == 1 and len(lines[0]) == 2  # 23:00 and 00:00; 03:00 alone
    xs = [px for line in lines for px, _ in line] + [px for px, _ in drawn.dots]
    ys = [py for line in lines for _, py in line] + [py for _, py in drawn.dots]
    assert xs[0] < xs[1] < xs[2]
    assert all(CHART_PAD <= v <= CHART_WIDTH - CHART_PAD for v in xs)
    assert all(CHART_PAD <= v <= CHART_HEIGHT - CHART_PAD for v in ys)
    assert drawn.dots[0][1] == pytest.approx(y(1.0))  # 9 of 3 is drawn as 100%


@pytest.mark.parametrize(
    "points", [[], [point(0, 0, 0), point(1, 0, 0)], [SeriesPoint(at="?", recovered=1, judged=1)]]
)
def test_a_series_with_nothing_judged_is_an_empty_chart(points: list[SeriesPoint]) -> None:
    drawn = chart(points, T0, T0 + 4 * HOUR, HOUR)
    assert (drawn.path, drawn.dots, drawn.judged, drawn.buckets, drawn.empty) == ("", (), 0, 0, True)
    svg = str(drawn.svg("Row 4.4.9"))
    assert "<path" not in svg and "<circle" not in svg and svg.count("<line") == 2


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_svg_escapes_its_label_and_holds_only_the_charts_own_elements() -> None:
    drawn = chart([point(0, 1, 1), point(1, 1, 2), point(3, 0, 1)], T0, T0 + 4 * HOUR, HOUR)
    svg = str(drawn.svg(f"Row {HOSTILE}"))
    assert "<script" not in svg and HOSTILE not in svg
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&#34;" in svg
    parsed = Elements()
    parsed.feed(svg)
    assert [tag for tag, _ in parsed.tags] == ["svg", "title", "line", "line", "path", "circle"]
    root = parsed.tags[0][1]
    assert (root["role"], root["aria-label"], root["viewbox"]) == (
        "img",
        f"Row {HOSTILE}",
        f"0 0 {CHART_WIDTH} {CHART_HEIGHT}",
    )
    assert "".join(parsed.text) == f"Row {HOSTILE}"
    assert all(
        "style" not in attrs and not any(k.startswith("on") for k in attrs) for _, attrs in parsed.tags
    )
    assert parsed.tags[4][1]["d"] == drawn.path and parsed.tags[4][1]["class"] == "chart-line"


def test_recovery_is_shown_in_seconds() -> None:
    assert (recovery(None), recovery(0), recovery(12_345), recovery(3_600_000)) == (
        "",
        "0.0 s",
        "12.3 s",
        "3600.0 s",
    )


# The page -------------------------------------------------------------------------------------


def row(rule: str, **fields: Any) -> RowStats:
    values: dict[str, Any] = {
        "rule": rule,
        "action": "retry_same_session",
        "failure_class": "unclassified",
        "harness": "claude-code",
        "harness_version": "2.1.332",
        "decisions": 5,
        "recovered": 3,
        "failed": 1,
        "abandoned": 0,
        "held": 0,
        "pending": 1,
        "success_rate": 0.75,
        "recovery_p50_s": 12.5,
        "recovery_p95_s": 40.25,
        "attempts_mean": 1.5,
    }
    return RowStats(**{**values, **fields})


def reply(**fields: Any) -> RunsStatsReply:
    values: dict[str, Any] = {
        "since": START,
        "runs": 9,
        "statuses": {"recovered": 3, "retrying": 1, "abandoned": 2, "operator": 3},
        "rows": [
            row("4.4.9"),
            row(
                "4.4.4",
                action="operator",
                failure_class="event_replay_conflict",
                harness="unknown",
                harness_version="unknown",
                decisions=3,
                recovered=0,
                failed=0,
                held=3,
                pending=0,
                success_rate=None,
                recovery_p50_s=None,
                recovery_p95_s=None,
                attempts_mean=None,
            ),
            row("4.4.10", action="continue_fresh", abandoned=2, recovered=0, success_rate=0.0),
        ],
        "series": [
            RowSeries(rule="4.4.9", points=[point(0, 1, 1), point(1, 0, 0), point(2, 2, 3)]),
            RowSeries(rule="4.4.10", points=[point(1, 0, 2)]),
            RowSeries(rule="4.4.4", points=[]),
        ],
        "truncated": False,
    }
    return RunsStatsReply(**{**values, **fields})


def render(values: dict[str, Any]) -> str:
    page = template_environment().get_template("outcomes.html")
    return page.render(
        actor="dev-alice", csrf="t", csrf_field="csrf_token", dev_login=True, path="/outcomes", **values
    )


def cells(html: str, name: str) -> list[str]:
    return [
        re.sub(r"<[^>]+>", "", c) for c in re.findall(rf'<td class="[^"]*\b{name}\b[^"]*">(.*?)</td>', html)
    ]


def test_the_page_shows_the_counts_the_rows_and_a_chart_per_row() -> None:
    html = render(page_values(parse({"since": "24h"}), reply()))
    assert 'id="outcomes-runs">9<' in html
    assert 'id="status-abandoned">2<' in html and 'id="status-running">0<' in html
    assert re.search(r'<tr class="attention"><td><strong>abandoned</strong></td>', html)
    assert 'id="outcomes-abandoned"' in html and 'href="/runs?status=abandoned"' in html
    # Sorted by row id as text; the operator row shows no rate, times or attempts.
    assert cells(html, "row-rule") == ["4.4.10", "4.4.4", "4.4.9"]
    assert cells(html, "row-rate") == ["0%", "-", "75%"]
    assert cells(html, "row-p50") == ["12.5 s", "-", "12.5 s"]
    assert cells(html, "row-p95") == ["40.2 s", "-", "40.2 s"]
    assert cells(html, "row-attempts") == ["1.50", "-", "1.50"]
    assert cells(html, "row-abandoned") == ["2", "0", "0"]
    assert cells(html, "row-held") == ["0", "3", "0"]
    assert html.count("<svg") == 2  # 4.4.10 and 4.4.9; 4.4.4 judged nothing
    assert "No decision of this row was judged" in html
    assert re.findall(r'<span class="chart-rule">([^<]*)</span>', html) == ["4.4.10", "4.4.4", "4.4.9"]
    assert "3 of 4 judged decisions recovered" in html and "per hour" in html
    assert 'aria-current="page">Outcomes<' in html
    assert "<script" not in html and "style=" not in html  # the console's CSP allows neither


def test_every_value_of_the_reply_is_escaped() -> None:
    hostile = reply(
        statuses={HOSTILE: 1},
        rows=[row(HOSTILE, action=HOSTILE, failure_class=HOSTILE, harness=HOSTILE, harness_version=HOSTILE)],
        series=[RowSeries(rule=HOSTILE, points=[point(0, 1, 1), point(1, 1, 1)])],
        since=HOSTILE,
    )
    html = render(page_values(parse({"runner_id": HOSTILE, "tenant": HOSTILE}), hostile))
    assert "<script" not in html and HOSTILE not in html
    assert html.count("&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&#34;") >= 10
    # A since that cannot be read: the chart's window starts at its first point.
    [path] = re.findall(r'<path class="chart-line" d="([^"]+)"', html)
    assert close(coordinates(path), [[(x(0, 24), y(1.0)), (x(1, 24), y(1.0))]])


def test_no_data_and_a_refusal_are_said_plainly() -> None:
    empty = reply(runs=0, statuses={}, rows=[], series=[])
    html = render(page_values(parse({"since": "1h", "tenant": "acme"}), empty))
    assert 'id="outcomes-empty"' in html and "No run was decided in the last hour for these filters" in html
    assert "<table" not in html and "<svg" not in html

    html = render(page_values(parse({"since": "2y"}), None, "Since is one of 1h, 24h, 7d, 30d."))
    assert re.search(r'<p role="alert" class="error" id="outcomes-error">Since is one of', html)
    assert "outcomes-window" not in html and "<table" not in html
    # The form comes back as typed, with the default window offered.
    assert '<option value="24h">' in html and "selected" not in html

    truncated = render(page_values(parse({}), reply(truncated=True)))
    assert 'id="outcomes-truncated"' in truncated
