"""What the simulation prints: a live progress line (stderr), the final tables (stdout), one
JSON object for scripts, and the demo's stories."""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import Any

from continuity.cli import tables
from continuity.tools.simulate.checker import Checker
from continuity.tools.simulate.outcomes import ScenarioRate
from continuity.tools.simulate.result import Judgement, Result
from continuity.tools.simulate.scenarios import SCENARIOS

CONTRADICTIONS_SHOWN = 20
WIDTH = tables.TABLE_WIDTH


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    return tables.table(header, rows, WIDTH)


def fit(text: str, indent: str = "", width: int = WIDTH) -> str:
    """`text` wrapped at word boundaries into lines of at most `width` columns; lines after
    the first start with `indent`."""
    return "\n".join(textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""])


def by_action(decisions: Counter[tuple[str, str]]) -> dict[str, dict[str, int]]:
    grouped: dict[str, dict[str, int]] = {}
    for (action, reason), n in sorted(decisions.items()):
        grouped.setdefault(action, {})[reason] = n
    return grouped


def progress_counts(published: int, checker: Checker) -> str:
    """The counts of the progress line (without the time, which always changes)."""
    actions = by_action(checker.decisions)
    inner = ", ".join(f"{action} {sum(reasons.values())}" for action, reasons in actions.items())
    parts = [  # what matters most first: a narrow terminal cuts the end
        f"events {checker.events} ({published} msgs)",
        f"contradictions {len(checker.contradictions)}",
        f"waiting {checker.outstanding()}",
        f"dead {sum(checker.dead_letters.values())}",
        f"decisions {sum(checker.decisions.values())}" + (f" ({inner})" if inner else ""),
    ]
    return "  ".join(parts)


def progress_line(elapsed: float, published: int, checker: Checker, width: int = WIDTH) -> str:
    """One line of at most `width` columns: the time, then the counts (the reasons are in the
    final table)."""
    return tables.clip(f"[{elapsed:6.1f}s] {progress_counts(published, checker)}", width)


def _per_scenario(result: Result) -> dict[str, dict[str, int]]:
    rows: dict[str, Counter[str]] = {}
    for story in result.stories:
        rows.setdefault(story.scenario, Counter())["runs"] += 1
    for run in result.checker.runs.values():
        row = rows.setdefault(run.scenario, Counter())
        for state in run.attempts.values():
            row["events"] += 1
            row["decisions"] += (state.first is not None) + (state.continued is not None)
            row["dead_letters"] += state.dead is not None
    for c in result.checker.contradictions:
        rows.setdefault(c.scenario, Counter())["contradictions"] += 1
    keys = ("runs", "events", "decisions", "dead_letters", "contradictions")
    return {name: {k: rows[name][k] for k in keys} for name in sorted(rows)}


def paths(result: Result) -> Counter[tuple[str, str]]:
    return Counter((s.scenario, s.path) for s in result.stories if s.steps)


def final_report(result: Result) -> str:
    s, checker = result.settings, result.checker
    events_per_s = checker.events / result.load_s if result.load_s else 0.0
    lines = [
        fit(
            f"simulated {s.runners} runners: {len(result.stories)} runs, {checker.events} events "
            f"({result.published} messages) in {result.load_s:.1f}s ({events_per_s:.1f} events/s), "
            f"all outcomes in {result.elapsed_s:.1f}s",
            "  ",
        ),
        fit(
            f"operator: {'present' if result.operator_present else 'absent'}"
            + "".join(f", {act} {n}" for act, n in sorted(result.operator_acts.items()))
            + f"; dead letters {'watched' if result.dead_letters_watched else 'not watched'}"
            + f"; redelivered decisions {checker.redelivered}"
            + "".join(f"; refused {code} {n}" for code, n in sorted(checker.refusals.items()))
            + f"; archive answers too late for the archiver {checker.late_archive_answers}",
            "  ",
        ),
        "",
    ]
    rows = [(name, *(str(v) for v in counts.values())) for name, counts in _per_scenario(result).items()]
    lines.append(table(rows, ("scenario", "runs", "events", "decisions", "dead letters", "contradictions")))
    lines.append("")
    decision_rows: list[tuple[str, ...]] = [(a, r, str(n)) for (a, r), n in sorted(checker.decisions.items())]
    lines.append(table(decision_rows, ("action", "reason", "decisions")))
    lines += _outcome_lines(result)
    for warning in result.warnings:
        lines.append(fit(f"warning: {warning}", "  "))
    lines.append("")
    if result.interrupted:
        lines.append("interrupted: outcomes still on their way were not waited for")
    if checker.contradictions:
        lines.append(f"CONTRADICTIONS: {len(checker.contradictions)}")
        for c in checker.contradictions[:CONTRADICTIONS_SHOWN]:
            lines.append(fit(f"  {c.run_id} [{c.scenario}] {c.text}", "      "))
        if len(checker.contradictions) > CONTRADICTIONS_SHOWN:
            lines.append(f"  ... and {len(checker.contradictions) - CONTRADICTIONS_SHOWN} more (see --json)")
    else:
        lines.append("contradictions: 0 (every decision matched the contract)")
    return "\n".join(lines)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}"


def _outcome_lines(result: Result) -> list[str]:
    """The turns the runners reported, and each scenario's success rate: configured, drawn by
    its runners, and judged by `continuity.runs.stats` (each over its judged decisions, n), with
    the difference from the configured one in points and the standard error of that
    probability over the runners' n, in points."""
    checker, judgement = result.checker, result.judgement
    recorded = ", ".join(f"{status} {n}" for status, n in sorted(checker.outcomes.items())) or "none"
    lines = [
        "",
        fit(
            f"turns completed after a decision: {checker.turns} (outcomes recorded: {recorded}; "
            f"sent again after a refusal for the quota: {checker.turns_resent})",
            "  ",
        ),
    ]
    if judgement is None:
        lines.append("outcomes not judged (no reconciliation service, or interrupted)")
        return lines
    listed = ", ".join(f"{status} {n}" for status, n in judgement.statuses.items()) or "none"
    lines.append(fit(f"runs list, the simulation's runs by status: {listed}", "  "))
    comparison = judgement.comparison
    if comparison is None:
        lines.append("runs stats did not answer: success rates not judged")
        return lines
    rows = [_rate_row(r) for r in comparison.scenarios]
    header = ("scenario", "harness", "true p", "runners (n)", "runs stats (n)", "diff (points)", "s.e.")
    lines += ["", table(rows, header)]
    wrong = len(comparison.disagreements)
    lines.append(
        f"runs stats rows: {len(comparison.rows)}, "
        + ("every one as the runners saw it" if not wrong else f"{wrong} unlike what the runners saw")
    )
    return lines


def _rate_row(r: ScenarioRate) -> tuple[str, ...]:
    harness = SCENARIOS[r.scenario].harness
    se = r.standard_error
    return (
        r.scenario,
        harness.name if harness is not None else "-",
        f"{100 * r.probability:.0f}%",
        f"{_percent(r.drawn)} ({r.judged})",
        f"{_percent(r.judged_by_server)} ({r.server_judged})",
        _points(r.points_off),
        "-" if se is None else f"{se:.1f}",
    )


def _judgement_json(judgement: Judgement | None) -> dict[str, Any] | None:
    if judgement is None:
        return None
    comparison = judgement.comparison
    return {
        "statuses": judgement.statuses,
        "unsettled": [
            {"run_id": run_id, "status": status, "expected": want}
            for run_id, status, want in judgement.unsettled
        ],
        "scenarios": None
        if comparison is None
        else [
            {
                "scenario": r.scenario,
                "probability": r.probability,
                "judged": r.judged,
                "recovered": r.recovered,
                "drawn_rate": r.drawn,
                "server_judged": r.server_judged,
                "server_recovered": r.server_recovered,
                "server_rate": r.judged_by_server,
                "points_off": r.points_off,
                "standard_error_points": r.standard_error,
            }
            for r in comparison.scenarios
        ],
        "rows": None
        if comparison is None
        else [
            {
                "rule": row.key[0],
                "action": row.key[1],
                "failure_class": row.key[2],
                "harness": row.key[3],
                "harness_version": row.key[4],
                "scenarios": list(row.scenarios),
                "runners": row.runners,
                "server": None
                if row.server is None
                else {
                    "recovered": row.server.recovered,
                    "failed": row.server.failed,
                    "abandoned": row.server.abandoned,
                    "held": row.server.held,
                    "pending": row.server.pending,
                },
                "agrees": row.agrees,
            }
            for row in comparison.rows
        ],
    }


def to_json(result: Result) -> dict[str, Any]:
    s, checker = result.settings, result.checker
    return {
        "ok": result.ok,
        "runners": s.runners,
        "runs": len(result.stories),
        "events": checker.events,
        "messages": result.published,
        "load_s": round(result.load_s, 3),
        "elapsed_s": round(result.elapsed_s, 3),
        "events_per_s": round(checker.events / result.load_s, 2) if result.load_s else 0.0,
        "decisions": by_action(checker.decisions),
        "dead_letters": {f"{subj} {reason}": n for (subj, reason), n in sorted(checker.dead_letters.items())},
        "refusals": dict(sorted(checker.refusals.items())),
        "scenarios": _per_scenario(result),
        "paths": [
            {"scenario": scenario, "path": path, "runs": n}
            for (scenario, path), n in paths(result).most_common()
        ],
        "operator": {"present": result.operator_present, **result.operator_acts},
        "turns": checker.turns,
        "turns_resent": checker.turns_resent,
        "outcomes": dict(sorted(checker.outcomes.items())),
        "judgement": _judgement_json(result.judgement),
        "redelivered": checker.redelivered,
        "late_archive_answers": checker.late_archive_answers,
        "interrupted": result.interrupted,
        "warnings": result.warnings,
        "contradictions": [
            {"run_id": c.run_id, "scenario": c.scenario, "text": c.text} for c in checker.contradictions
        ],
    }


def demo_stories(result: Result) -> str:
    """Every distinct path a run took, grouped by scenario, with how many runs took it."""
    lines = ["What Continuity did with each kind of failure (runs per path):"]
    grouped: dict[str, list[tuple[str, int]]] = {}
    for (scenario, path), n in paths(result).most_common():
        grouped.setdefault(scenario, []).append((path, n))
    for name in SCENARIOS:
        if name not in grouped:
            continue
        lines.append(fit(f"  {SCENARIOS[name].label}: the contract says {SCENARIOS[name].outcome}", "    "))
        for path, n in grouped[name]:
            lines.append(fit(f"    {n:>4} x  {path}", " " * 12))
    return "\n".join(lines)
