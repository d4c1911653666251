"""Both decision tables of the contract, read from docs/contract-v1.md and compared with the code
row by row: the recovery decision (4.4, shared/policy/recovery.py) and the resume decision
(3.3, shared/policy/resume.py), whose shipped rows are in shared/policy/policy.py.

The parsers below read only the wording the contract uses; anything else in a row is a
`ParseError`, so a reworded row fails here until the code (and this parser) follow it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from itertools import zip_longest
from pathlib import Path
from typing import Any, get_args

import pytest

from services.session_store import step
from shared.contract.sessions import DecideRequest, SessionRef
from shared.contract.types import (
    Action,
    CheckpointPolicy,
    Compatibility,
    DecisionReason,
    FailureClass,
    SessionReason,
    SessionState,
)
from shared.policy import SHIPPED
from shared.policy import policy as shipped
from shared.policy import recovery as table
from shared.policy import resume as rules
from shared.records import decisions
from shared.records.session import V1_FIELDS, StoredSession, binding_stamp

DOC = (Path(__file__).resolve().parents[2] / "docs" / "contract-v1.md").read_text()

CLASSES: frozenset[str] = frozenset(get_args(FailureClass))
POLICIES: frozenset[str] = frozenset(get_args(CheckpointPolicy))
VERDICTS: frozenset[str] = frozenset(get_args(table.Verdict))
DECISION_REASONS: frozenset[str] = frozenset(get_args(DecisionReason))
SESSION_REASONS: frozenset[str] = frozenset(get_args(SessionReason))
STATES: frozenset[str] = frozenset(get_args(SessionState))
COMPATIBILITIES: frozenset[str] = frozenset(get_args(Compatibility))
REQUEST_FIELDS: frozenset[str] = frozenset(DecideRequest.__struct_fields__)


class ParseError(ValueError):
    """The document says something in a table that this parser does not know how to read."""


# ---- reading the document ----------------------------------------------------------------


def section(doc: str, heading: str) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    start = doc.find(f"\n{heading}")
    if start < 0:
        raise ParseError(f"no section {heading!r}")
    body = doc[start + len(heading) + 1 :]
    end = re.search(r"^#{2,3} ", body, flags=re.MULTILINE)
    return body[: end.start()] if end else body


def flat(text: str) -> str:
    return " ".join(text.split())


def ticked(name: str, allowed: frozenset[str], what: str, where: str) -> str:
    if name not in allowed:
        raise ParseError(f"{where}: {name!r} is not a {what}")
    return name


def held_actions(text: str) -> frozenset[str]:
    """The actions named in "After an `x` or `y` decision the saved session is ... `held`"."""
    found = re.search(
        r"After an? (.+?) decision the saved session is left exactly as it was and its state becomes `held`",
        flat(text),
    )
    if found is None:
        raise ParseError("4.4: no sentence saying which decisions hold the saved session")
    return frozenset(re.findall(r"`([a-z_]+)`", found.group(1)))


def rejected_actions(text: str) -> frozenset[str]:
    """The actions named in "After a `x` decision of this table the saved handle is rejected"."""
    found = re.search(
        r"After an? (`[a-z_]+`(?:(?:, | or )`[a-z_]+`)*) decision of this table the saved handle is rejected",
        flat(text),
    )
    if found is None:
        raise ParseError("4.4: no sentence saying which decisions reject the saved handle")
    return frozenset(re.findall(r"`([a-z_]+)`", found.group(1)))


def recovery_condition(cell: str, where: str) -> dict[str, Any]:
    """The "class or condition" cell as the `table.Row` fields it sets."""
    fields: dict[str, Any] = {"classes": ()}
    for part in re.split(r", | and ", cell.strip()):
        if part == "`governed_wait_elapsed`":
            fields["governed_wait_elapsed"] = True
        elif part == "or any event with `pending_tool_call`":
            fields["or_pending_tool_call"] = True
        elif part == "otherwise":
            pass
        elif part == "the tenant's recovery budget spent":
            fields["budget_spent"] = True
        elif part == "unclassified" or re.fullmatch(r"`[a-z_]+`", part):
            fields["classes"] += (ticked(part.strip("`"), CLASSES, "failure class", where),)
        elif match := re.fullmatch(r"attempt >= (\d+)", part):
            fields["min_attempt"] = int(match.group(1))
        elif match := re.fullmatch(r"policy `([a-z_]+)`", part):
            fields["policy"] = ticked(match.group(1), POLICIES, "checkpoint policy", where)
        else:
            raise ParseError(f"{where}: cannot read the condition {part!r}")
    return fields


def recovery_verdict(cell: str, where: str) -> str:
    cell = cell.strip()
    if cell == "archive, then `open_replacement`":
        return "archive"
    match = re.fullmatch(r"`([a-z_]+)`( \(with `not_before`, backoff\))?", cell)
    if match is None:
        raise ParseError(f"{where}: cannot read the action {cell!r}")
    return ticked(match.group(1), VERDICTS, "verdict", where)


def recovery_table(doc: str) -> tuple[table.Row, ...]:
    """Contract 4.4: one `table.Row` per line of the markdown table, in order."""
    text = section(doc, "### 4.4 Decision table")
    held = held_actions(text)
    rejected = rejected_actions(text)
    lines = [line for line in text.splitlines() if line.startswith("|")]
    if len(lines) < 3 or lines[0] != "| row | class or condition | action | reason |":
        raise ParseError("4.4: the table's header is not `row | class or condition | action | reason`")
    parsed = []
    for number, line in enumerate(lines[2:], start=1):
        where = f"4.4 row {number}"
        cells = line.strip().strip("|").split("|")
        if len(cells) != 4:
            raise ParseError(f"{where}: expected 4 cells, found {len(cells)}")
        row_id, condition, action, reason = cells
        id_match = re.fullmatch(r"`(4\.4\.\d+)`", row_id.strip())
        if id_match is None:
            raise ParseError(f"{where}: cannot read the row id {row_id!r}")
        verdict = recovery_verdict(action, where)
        reason_match = re.fullmatch(r"`([a-z_]+)`", reason.strip())
        if reason_match is None:
            raise ParseError(f"{where}: cannot read the reason {reason!r}")
        parsed.append(
            table.Row(
                id_match.group(1),
                **recovery_condition(condition, where),
                verdict=verdict,
                reason=ticked(reason_match.group(1), DECISION_REASONS, "decision reason", where),
                holds_session=verdict in held,
                rejects_session=verdict in rejected,
            )
        )
    return tuple(parsed)


def numbered_rules(text: str) -> dict[int, str]:
    """The items of a numbered markdown list, each with its continuation lines, flattened."""
    items: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if match := re.match(r"^(\d+)\. (.*)", line):
            current = items.setdefault(int(match.group(1)), [])
            current.append(match.group(2))
        elif current is not None and line.startswith("   "):
            current.append(line)
        else:
            current = None
    return {number: flat(" ".join(lines)) for number, lines in items.items()}


def resume_condition(text: str, where: str) -> dict[str, Any]:
    """One condition of a 3.3 rule as the `rules.Rule` fields it sets."""
    if text == "no record":
        return {"check": "no_record"}
    if text == "stored generation missing or not bound (3.1), or `ready_generation` null":
        return {"check": "generation_missing"}
    if text == "the two differ":
        return {"check": "generation_changed"}
    if match := re.fullmatch(r"state `([a-z_]+)`", text):
        return {"check": "state", "value": ticked(match.group(1), STATES, "session state", where)}
    if match := re.fullmatch(r"`([a-z_]+)` differs(?: from the stored ([a-z_]+))?", text):
        request_field = ticked(match.group(1), REQUEST_FIELDS, "decide request field", where)
        stored_field = match.group(2) or request_field
        return {
            "check": "differs",
            "request_field": request_field,
            "stored_field": ticked(stored_field, frozenset(V1_FIELDS), "stored field", where),
        }
    if match := re.fullmatch(r"stored ([a-z_]+) empty", text):
        return {
            "check": "stored_empty",
            "stored_field": ticked(match.group(1), frozenset(V1_FIELDS), "stored field", where),
        }
    raise ParseError(f"{where}: cannot read the condition {text!r}")


def resume_rules(doc: str) -> tuple[rules.Rule, ...]:
    """Contract 3.3: one `rules.Rule` per clause of the numbered rules, in order."""
    items = numbered_rules(section(doc, "### 3.3 `continuity.sessions.decide`"))
    if sorted(items) != list(range(1, len(items) + 1)):
        raise ParseError(f"3.3: rules numbered {sorted(items)}")
    parsed: list[rules.Rule] = []
    for number, text in items.items():
        where = f"3.3 rule {number}"
        text = text.removesuffix(".")
        if text.startswith("otherwise "):
            answer = text.removeprefix("otherwise ")
            if answer != (
                '`{"mode": "resume", "resume_session_id": <stored handle>, "transcript": '
                f'"{rules.RESUME_TRANSCRIPT}", "reason": null}}`'
            ):
                raise ParseError(f"{where}: cannot read the resume answer {answer!r}")
            parsed.append(rules.Rule(f"3.3.{number}", number, "otherwise", None))
            continue
        only_when = None
        if match := re.match(r"only when `compatibility` is `([a-z-]+)`: ", text):
            only_when = ticked(match.group(1), COMPATIBILITIES, "compatibility", where)
            text = text[match.end() :]
        clauses = text.split("; ")
        for letter, clause in zip("abcdefgh", clauses, strict=False):
            condition, arrow, reason = clause.rpartition(" → ")
            reason_match = re.fullmatch(r"`([a-z_]+)`", reason)
            if not arrow or reason_match is None:
                raise ParseError(f"{where}: cannot read the clause {clause!r}")
            parsed.append(
                rules.Rule(
                    id=f"3.3.{number}{letter}" if len(clauses) > 1 else f"3.3.{number}",
                    number=number,
                    reason=ticked(reason_match.group(1), SESSION_REASONS, "session reason", where),
                    only_when=only_when,
                    **resume_condition(condition, where),
                )
            )
    return tuple(parsed)


def mismatches(document: Sequence[object], code: Sequence[object]) -> list[str]:
    """Row by row: every position where the document and the code differ, or one has no row."""
    return [
        f"row {number}: document {doc_row} != code {code_row}"
        for number, (doc_row, code_row) in enumerate(zip_longest(document, code), start=1)
        if doc_row != code_row
    ]


# ---- the document and the code agree ------------------------------------------------------


def test_the_recovery_table_matches_the_contract_row_by_row() -> None:
    assert mismatches(recovery_table(DOC), shipped.RECOVERY) == []


def test_the_resume_rules_match_the_contract_clause_by_clause() -> None:
    assert mismatches(resume_rules(DOC), shipped.RESUME) == []


def test_the_hold_rule_is_the_contract_sentence() -> None:
    held = held_actions(section(DOC, "### 4.4 Decision table"))
    assert held == {"operator", "reconcile"}
    assert {action for action in get_args(Action) if decisions.holds_session(action)} == held
    assert not decisions.holds_session("archive")


def test_the_tables_hold_column_is_the_rule_every_service_applies() -> None:
    assert all(row.holds_session == decisions.holds_session(row.verdict) for row in shipped.RECOVERY)


def test_the_reject_rule_is_the_contract_sentence() -> None:
    rejected = rejected_actions(section(DOC, "### 4.4 Decision table"))
    assert rejected == {"continue_fresh"} == decisions.REJECTING_ACTIONS
    assert all(row.rejects_session == decisions.rejects(row.verdict) for row in shipped.RECOVERY)
    assert not any(row.rejects_session and row.holds_session for row in shipped.RECOVERY)


def test_every_verdict_holds_or_not_in_every_row_alike() -> None:
    # The hold rule is per action, so that services deciding the same action hold alike.
    for verdict in VERDICTS:
        assert len({row.holds_session for row in shipped.RECOVERY if row.verdict == verdict}) <= 1, verdict


def test_the_attempt_budget_and_the_safe_policy_are_the_contract_values() -> None:
    budget = re.search(r"share one budget of (\d+)", flat(section(DOC, "### 4.1 Event")))
    assert budget is not None and int(budget.group(1)) == shipped.ATTEMPT_BUDGET
    safe = re.search(r"with no record it is `([a-z_]+)`", flat(section(DOC, "### 4.4 Decision table")))
    assert safe is not None and safe.group(1) == table.SAFE_POLICY


def test_the_fresh_answer_and_the_rules_for_compatibility_none_are_the_contract_values() -> None:
    text = flat(section(DOC, "### 3.3 `continuity.sessions.decide`"))
    assert f'`resume_session_id: null`, `transcript: "{rules.FRESH_TRANSCRIPT}"`' in text
    found = re.search(
        r'`compatibility: "none"` keeps the behaviour of adapters that did not opt in: rules ([\d, ]+)\.',
        text,
    )
    assert found is not None
    numbers = {int(n) for n in found.group(1).split(", ")}
    assert numbers == {rule.number for rule in shipped.RESUME if rule.only_when in (None, "none")}


def test_every_rule_names_real_fields() -> None:
    for rule in shipped.RESUME:
        if rule.check == "differs":
            assert rule.request_field in REQUEST_FIELDS, rule
        if rule.check in ("differs", "stored_empty"):
            assert rule.stored_field in V1_FIELDS, rule
        if rule.check == "state":
            assert rule.value in STATES, rule


# ---- a change to either side fails ---------------------------------------------------------


def doctored(old: str, new: str) -> str:
    assert DOC.count(old) == 1, old
    return DOC.replace(old, new)


ROW_6 = (
    "| `4.4.7` | unclassified, policy `allow_replacement_after_resume_failure` | archive, then "
    "`open_replacement` | `native_session_continuity_break` |"
)
ROW_7 = (
    "| `4.4.8` | unclassified, policy `allow_replacement_after_governed_wait` and `governed_wait_elapsed` | "
    "archive, then `open_replacement` | `native_session_continuity_break` |"
)
ROW_EXHAUSTED = (
    "| `4.4.6` | unclassified, `session_busy`, attempt >= 3 | `operator` | `native_session_retry_exhausted` |"
)
ROW_BREAKER = (
    "| `4.4.5` | unclassified, `session_busy`, the tenant's recovery budget spent | `operator` | "
    "`tenant_recovery_budget_exhausted` |"
)
ROW_MISSING = "| `4.4.10` | `native_session_missing` | `continue_fresh` | `native_session_missing` |"
ROW_OVERFLOW = "| `4.4.11` | `context_overflow` | `operator` | `native_context_overflow` |"
ROW_CORRUPT = "| `4.4.12` | `transcript_corrupt` | `operator` | `native_transcript_corrupt` |"
ROW_BUSY = (
    "| `4.4.13` | `session_busy` | `retry_same_session` (with `not_before`, backoff) | "
    "`native_session_busy` |"
)


@pytest.mark.parametrize(
    ("old", "new", "rows"),
    [
        pytest.param(f"{ROW_6}\n{ROW_7}", f"{ROW_7}\n{ROW_6}", [7, 8], id="two rows swapped"),
        pytest.param(
            f"{ROW_EXHAUSTED}\n{ROW_6}", f"{ROW_6}\n{ROW_EXHAUSTED}", [6, 7], id="budget after policy"
        ),
        pytest.param(ROW_EXHAUSTED, ROW_EXHAUSTED.replace(">= 3", ">= 4"), [6], id="another budget"),
        pytest.param(ROW_6, ROW_6.replace("resume_failure", "governed_wait"), [7], id="another policy"),
        pytest.param(ROW_7, ROW_7.replace(" and `governed_wait_elapsed`", ""), [8], id="condition dropped"),
        pytest.param(
            "| `event_replay_conflict` | `operator` |",
            "| `event_replay_conflict` | `retry_same_session` |",
            [4],
            id="another action",
        ),
        pytest.param(
            "| `provider_attach_refused`, `provider_state_incompatible` |",
            "| `provider_attach_refused` |",
            [2],
            id="class dropped",
        ),
        pytest.param(
            "`provider_side_effect_pending`, or any event with `pending_tool_call` |",
            "`provider_side_effect_pending` |",
            [1],
            id="pending tool call dropped",
        ),
        pytest.param(
            "`source_reconciliation_required` | `operator` | `native_runner_source_reconciliation_required`",
            "`source_reconciliation_required` | `operator` | `native_provider_state_incompatible`",
            [3],
            id="another reason",
        ),
        pytest.param(
            "After an\n`operator` or `reconcile` decision", "After an\n`operator` decision", [1], id="hold"
        ),
        pytest.param(f"{ROW_6}\n", "", [7, 8, 9, 10, 11, 12, 13], id="row removed"),
        pytest.param(f"{ROW_6}\n", f"{ROW_6}\n{ROW_6}\n", [8, 9, 10, 11, 12, 13, 14], id="row added"),
        pytest.param(
            ROW_BREAKER, ROW_BREAKER.replace(", the tenant's recovery budget spent", ""), [5], id="breaker"
        ),
        pytest.param(ROW_BREAKER, ROW_BREAKER.replace(", `session_busy`", ""), [5], id="busy not spent"),
        pytest.param(ROW_EXHAUSTED, ROW_EXHAUSTED.replace(", `session_busy`", ""), [6], id="busy unbounded"),
        pytest.param(
            ROW_MISSING, ROW_MISSING.replace("`continue_fresh`", "`retry_same_session`"), [10], id="missing"
        ),
        pytest.param(
            ROW_OVERFLOW, ROW_OVERFLOW.replace("`operator`", "`continue_fresh`"), [11], id="overflow"
        ),
        pytest.param(
            ROW_CORRUPT,
            ROW_CORRUPT.replace("native_transcript_corrupt", "native_context_overflow"),
            [12],
            id="corrupt",
        ),
        pytest.param(
            ROW_BUSY, ROW_BUSY.replace("native_session_busy", "native_session_interrupted"), [13], id="busy"
        ),
        pytest.param(
            f"{ROW_CORRUPT}\n{ROW_BUSY}", f"{ROW_BUSY}\n{ROW_CORRUPT}", [12, 13], id="harness swapped"
        ),
        pytest.param(
            "After a `continue_fresh` decision of this table",
            "After an `operator` decision of this table",
            [2, 3, 4, 5, 6, 10, 11, 12],
            id="reject",
        ),
    ],
)
def test_a_doctored_recovery_table_is_reported(old: str, new: str, rows: list[int]) -> None:
    found = mismatches(recovery_table(doctored(old, new)), shipped.RECOVERY)
    assert [int(line.split(":")[0].removeprefix("row ")) for line in found] == rows


@pytest.mark.parametrize(
    ("old", "new", "rows"),
    [
        pytest.param(
            "`model` differs → `model_changed`; `cwd` differs → `cwd_changed`",
            "`cwd` differs → `cwd_changed`; `model` differs → `model_changed`",
            [5, 6],
            id="two clauses swapped",
        ),
        pytest.param(
            "state `archived` → `session_archived`", "state `held` → `session_archived`", [3], id="state"
        ),
        pytest.param(
            "`latest_cursor` differs from the stored cursor",
            "`latest_cursor` differs from the stored prompt_hash",
            [8],
            id="another stored field",
        ),
        pytest.param("stored cursor empty", "stored model empty", [7], id="another empty field"),
        pytest.param(
            "only when `compatibility` is `profile-ready`: ",
            "",
            [9, 10],
            id="rule 3 for every adapter",
        ),
        pytest.param(
            # Rule 3 left with one clause: its id loses its letter too.
            "; the two differ →\n   `compatibility_generation_changed`",
            "",
            [9, 10, 11],
            id="clause removed",
        ),
        pytest.param(
            "`missing_cursor`; `latest", "`conversation_advanced`; `latest", [7], id="another reason"
        ),
    ],
)
def test_a_doctored_resume_rule_is_reported(old: str, new: str, rows: list[int]) -> None:
    found = mismatches(resume_rules(doctored(old, new)), shipped.RESUME)
    assert [int(line.split(":")[0].removeprefix("row ")) for line in found] == rows


@pytest.mark.parametrize(
    ("parse", "old", "new"),
    [
        (recovery_table, ", `session_busy`, attempt >= 3 |", ", `session_busy`, attempt > 2 |"),
        (recovery_table, "| `session_busy` | `retry", "| `sessions_busy` | `retry"),
        (
            recovery_table,
            "After a `continue_fresh` decision of this table",
            "After a continue_fresh decision of this table",
        ),
        (
            recovery_table,
            "| `event_replay_conflict` | `operator` |",
            "| `event_replay_conflict` | `escalate` |",
        ),
        (
            recovery_table,
            "| `event_replay_conflict` | `operator` |",
            "| `event_replay_conflicts` | `operator` |",
        ),
        (recovery_table, "| row | class or condition | action | reason |", "| class | action | reason |"),
        (recovery_table, "| `4.4.6` |", "| 4.4.6 |"),
        (resume_rules, "stored cursor empty", "stored cursor blank"),
        (resume_rules, "the two differ", "they differ"),
        (resume_rules, '"transcript":\n   "incremental"', '"transcript":\n   "full"'),
        (resume_rules, "state `rejected` → `resume_target_rejected`", "state `rejected` → `resume_rejected`"),
    ],
)
def test_wording_the_parser_cannot_read_fails(parse: Callable[[str], object], old: str, new: str) -> None:
    parse(DOC)
    with pytest.raises(ParseError):
        parse(doctored(old, new))


def test_a_changed_code_table_is_reported() -> None:
    swapped = (*shipped.RECOVERY[:6], shipped.RECOVERY[7], shipped.RECOVERY[6], *shipped.RECOVERY[8:])
    assert len(mismatches(recovery_table(DOC), swapped)) == 2
    no_hold = (dataclasses.replace(shipped.RECOVERY[0], holds_session=False), *shipped.RECOVERY[1:])
    assert len(mismatches(recovery_table(DOC), no_hold)) == 1
    # A planted row: the missing session retried as it is, in the code only.
    planted = dataclasses.replace(shipped.RECOVERY[9], verdict="retry_same_session", rejects_session=False)
    assert mismatches(recovery_table(DOC), (*shipped.RECOVERY[:9], planted, *shipped.RECOVERY[10:])) == [
        f"row 10: document {shipped.RECOVERY[9]} != code {planted}"
    ]
    no_reject = dataclasses.replace(shipped.RECOVERY[9], rejects_session=False)
    assert (
        len(mismatches(recovery_table(DOC), (*shipped.RECOVERY[:9], no_reject, *shipped.RECOVERY[10:]))) == 1
    )
    shorter = shipped.RESUME[:-1]
    assert mismatches(resume_rules(DOC), shorter) == [f"row 11: document {shipped.RESUME[-1]} != code None"]
    guard = dataclasses.replace(shipped.RESUME[4], request_field="adapter", stored_field="adapter")
    assert len(mismatches(resume_rules(DOC), (*shipped.RESUME[:4], guard, *shipped.RESUME[5:]))) == 1


# ---- the evaluators read the rows as the contract means them -------------------------------

V1 = {
    "native_session_id": "native-1",
    "adapter": "deepseek",
    "model": "m1",
    "cwd": "/work",
    "cursor": "c1",
    "prompt_hash": "",
    "checkpoint_policy": "same_session_only",
    "updated_at": "2026-11-30T12:00:00Z",
}


def stored(*, state: str = "active", generation: str = "g1", **v1: str) -> StoredSession:
    fields = {**V1, **v1}
    raw = {name.encode(): value.encode() for name, value in fields.items()}
    raw[b"revision"], raw[b"epoch"] = b"4", b"2"
    if state != "active":
        raw[b"state"] = state.encode()
    if generation:
        raw[b"g"] = binding_stamp(fields) + generation.encode()
    return StoredSession.from_hash(raw)


def request(**fields: Any) -> DecideRequest:
    base: dict[str, Any] = {
        "session": SessionRef(tenant="t", conversation_id="c", agent_id="a"),
        "adapter": "deepseek",
        "model": "m1",
        "cwd": "/work",
        "latest_cursor": "c1",
        "compatibility": "profile-ready",
        "ready_generation": "g1",
    }
    return DecideRequest(**{**base, **fields})


FIRES: dict[str | None, tuple[StoredSession | None, DecideRequest]] = {
    "no_session": (None, request()),
    "session_held": (stored(state="held", model="other"), request()),
    "session_archived": (stored(state="archived"), request()),
    "resume_target_rejected": (stored(state="rejected"), request()),
    "model_changed": (stored(), request(model="m2", cwd="/elsewhere")),
    "cwd_changed": (stored(cursor=""), request(cwd="/elsewhere")),
    "missing_cursor": (stored(cursor=""), request(latest_cursor=None)),
    "conversation_advanced": (stored(), request(latest_cursor=None, ready_generation=None)),
    "compatibility_generation_missing": (stored(generation=""), request()),
    "compatibility_generation_changed": (stored(), request(ready_generation="g2")),
    None: (stored(), request()),
}


def first(record: StoredSession | None, req: DecideRequest) -> rules.Rule | None:
    generation = step.generation_check(record, req) if record is not None else "not_compared"
    return rules.first_rule(shipped.RESUME, step.facts_of(record, req, generation))


def decide(record: StoredSession | None, req: DecideRequest) -> Any:
    generation = step.generation_check(record, req) if record is not None else "not_compared"
    return step.decide(record, req, SHIPPED, generation)


@pytest.mark.parametrize("rule", shipped.RESUME, ids=lambda rule: str(rule.reason))
def test_each_resume_rule_fires_first_when_its_condition_holds(rule: rules.Rule) -> None:
    record, req = FIRES[rule.reason]
    assert first(record, req) == rule
    reply = decide(record, req)
    assert reply.reason == rule.reason
    assert reply.rule == rule.id and reply.policy == SHIPPED.version
    assert (reply.mode, reply.transcript) == (
        ("resume", "incremental") if rule.reason is None else ("fresh", "full")
    )
    assert reply.resume_session_id == ("native-1" if rule.reason is None else None)


def test_rule_3_applies_only_to_adapters_that_opted_in() -> None:
    for record, req in (
        (stored(generation=""), request(compatibility="none")),
        (stored(), request(compatibility="none", ready_generation="g2")),
    ):
        assert first(record, req) == shipped.RESUME[-1]
        assert decide(record, req).generation == "not_compared"


def test_the_generation_comparison_is_named_never_valued() -> None:
    assert decide(stored(), request()).generation == "matched"
    assert decide(stored(), request(ready_generation="g2")).generation == "changed"
    assert decide(stored(generation=""), request()).generation == "missing"
    assert decide(stored(), request(ready_generation=None)).generation == "missing"
    # A declared compatibility (looked up by the store) resumes across the change.
    declared = step.decide(
        stored(), request(ready_generation="g2"), SHIPPED, "declared", "compat-0123456789abcdef"
    )
    assert (declared.mode, declared.rule, declared.generation) == ("resume", "3.3.4", "declared")
    assert declared.declaration == "compat-0123456789abcdef"
    assert decide(stored(), request(ready_generation="g2")).declaration is None


def test_each_recovery_row_fires_first_when_its_condition_holds() -> None:
    for number, row in enumerate(shipped.RECOVERY, start=1):
        given = table.Facts(
            failure_class=row.classes[-1],
            pending_tool_call=row.or_pending_tool_call,
            attempt=row.min_attempt or 1,
            policy=row.policy or table.SAFE_POLICY,
            governed_wait_elapsed=row.governed_wait_elapsed,
            recovery_budget_spent=row.budget_spent,
        )
        assert table.decide_row(shipped.RECOVERY, given) is row, number
        assert row.id == f"4.4.{number}"
