"""The resume decision (contract 3.3) as data: first matching rule wins.

`RULES` holds one `Rule` per clause of the contract's numbered rules, in the same order, written
as plain values so that it can be read against the document clause by clause
(tests/unit/test_decision_tables.py parses the document and compares). Every answer other than
the final resume rule is a fresh session with the full transcript.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from shared.contract.sessions import DecideReply, DecideRequest
from shared.contract.types import Compatibility, SessionReason, Transcript
from shared.records.session import StoredSession

Check = Literal[
    "no_record",  # there is no session record
    "state",  # the record's state is `value`
    "differs",  # the request's `request_field` differs from the stored `stored_field`
    "stored_empty",  # the stored `stored_field` is empty
    "generation_missing",  # no trusted stored generation (3.1), or no `ready_generation`
    "generation_changed",  # the stored generation and `ready_generation` differ
    "otherwise",  # always: the final resume rule
]

FRESH_TRANSCRIPT: Transcript = "full"
RESUME_TRANSCRIPT: Transcript = "incremental"


@dataclass(frozen=True, slots=True)
class Rule:
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


RULES: tuple[Rule, ...] = (
    Rule(1, "no_record", "no_session"),
    Rule(1, "state", "session_held", value="held"),
    Rule(1, "state", "session_archived", value="archived"),
    Rule(1, "state", "resume_target_rejected", value="rejected"),
    Rule(2, "differs", "model_changed", request_field="model", stored_field="model"),
    Rule(2, "differs", "cwd_changed", request_field="cwd", stored_field="cwd"),
    Rule(2, "stored_empty", "missing_cursor", stored_field="cursor"),
    Rule(2, "differs", "conversation_advanced", request_field="latest_cursor", stored_field="cursor"),
    Rule(3, "generation_missing", "compatibility_generation_missing", only_when="profile-ready"),
    Rule(3, "generation_changed", "compatibility_generation_changed", only_when="profile-ready"),
    Rule(4, "otherwise", None),
)


_RULES_BY_COMPATIBILITY: dict[str, tuple[Rule, ...]] = {
    compatibility: tuple(rule for rule in RULES if rule.only_when in (None, compatibility))
    for compatibility in get_args(Compatibility)
}
"""The rules that apply to each `compatibility`, in order: looked up once per decision."""


def first_rule(stored: StoredSession | None, req: DecideRequest) -> Rule:
    """The first rule that applies; plain comparisons in one loop, as this runs per decide."""
    for rule in _RULES_BY_COMPATIBILITY[req.compatibility]:
        check = rule.check
        if stored is None:
            # Only `no_record` applies without a record: every other check reads it.
            if check == "no_record":
                return rule
        elif check == "differs":
            # A null request value compares as empty, as the stored fields are strings.
            if (getattr(req, rule.request_field) or "") != stored.v1[rule.stored_field]:
                return rule
        elif check == "state":
            if stored.state == rule.value:
                return rule
        elif check == "stored_empty":
            if not stored.v1[rule.stored_field]:
                return rule
        elif check == "generation_missing":
            if not stored.generation_trusted or req.ready_generation is None:
                return rule
        elif check == "generation_changed":
            if req.ready_generation != stored.generation:
                return rule
        elif check == "otherwise":
            return rule
    raise ValueError("no resume rule applies")  # unreachable while the last rule is `otherwise`


def decide(stored: StoredSession | None, req: DecideRequest) -> DecideReply:
    rule = first_rule(stored, req)
    if rule.reason is None and stored is not None:
        return DecideReply(
            mode="resume",
            resume_session_id=stored.handle,
            transcript=RESUME_TRANSCRIPT,
            reason=None,
            revision=stored.revision,
            epoch=stored.epoch,
        )
    return DecideReply(
        mode="fresh",
        resume_session_id=None,
        transcript=FRESH_TRANSCRIPT,
        reason=rule.reason,
        revision=stored.revision if stored else None,
        epoch=stored.epoch if stored else None,
    )
