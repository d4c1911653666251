"""The resume decision (contract 3.3) as data: rules, first match wins.

A `Rule` is one clause of the contract's numbered rules, written as plain values so that it can
be read against the document clause by clause (tests/unit/test_decision_tables.py parses the
document and compares). The rules read `ResumeFacts`, what a decide request and its stored
record say once compared: never a generation value, only the comparison's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.contract.types import Compatibility, GenerationCheck, SessionReason, SessionState, Transcript

Check = Literal[
    "no_record",  # there is no session record
    "state",  # the record's state is `value`
    "differs",  # the request's `request_field` differs from the stored `stored_field`
    "stored_empty",  # the stored `stored_field` is empty
    "generation_missing",  # no trusted stored generation (3.1), or no `ready_generation`
    "generation_changed",  # the stored generation and `ready_generation` differ, undeclared
    "otherwise",  # always: the resume rule
]

FRESH_TRANSCRIPT: Transcript = "full"
RESUME_TRANSCRIPT: Transcript = "incremental"

COMPARED: dict[str, str] = {"model": "model", "cwd": "cwd", "latest_cursor": "cursor"}
"""The request fields a rule may compare, each with the stored field it is compared with."""

STORED: frozenset[str] = frozenset(COMPARED.values())
"""The stored fields a rule may find empty."""


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    """The clause's stable id, `3.3.<rule><letter>`, recorded in every explanation."""
    number: int
    """The contract's rule number (1 to 4)."""
    check: Check
    reason: SessionReason | None
    """The answer's reason; None only for the resume rule."""
    value: str = ""
    request_field: str = ""
    stored_field: str = ""
    only_when: Compatibility | None = None
    """The rule applies only when the request's `compatibility` is this value."""


@dataclass(frozen=True, slots=True)
class ResumeFacts:
    """A decide request held against its stored record (`record` False: none, or one the runner
    may not see; every other field is then unread)."""

    record: bool
    state: SessionState | str = "active"
    differs: frozenset[str] = frozenset()
    """The request fields (keys of `COMPARED`) whose value differs from the stored one."""
    empty: frozenset[str] = frozenset()
    """The stored fields (of `STORED`) that are empty."""
    compatibility: Compatibility = "none"
    generation: GenerationCheck = "not_compared"


def first_rule(rules: tuple[Rule, ...], facts: ResumeFacts) -> Rule | None:
    """The first rule that applies, None when none does (a loaded policy is total)."""
    for rule in rules:
        if rule.only_when is not None and rule.only_when != facts.compatibility:
            continue
        check = rule.check
        if not facts.record:
            # Only `no_record` applies without a record: every other check reads it.
            if check == "no_record":
                return rule
        elif check == "differs":
            if rule.request_field in facts.differs:
                return rule
        elif check == "state":
            if facts.state == rule.value:
                return rule
        elif check == "stored_empty":
            if rule.stored_field in facts.empty:
                return rule
        elif check == "generation_missing":
            if facts.generation == "missing":
                return rule
        elif check == "generation_changed":
            if facts.generation == "changed":
                return rule
        elif check == "otherwise":
            return rule
    return None


def resumes(rule: Rule) -> bool:
    """Whether the rule's answer resumes the stored session."""
    return rule.reason is None
