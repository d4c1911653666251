"""Constrained scalar types of contract v1 (section 1 and its Limits table).

Patterns end in `\\Z`, not `$`: Python's `$` also matches before a trailing newline, and a
value with a newline must fail decoding.
"""

from __future__ import annotations

import calendar
import re
from typing import Annotated, Literal

from msgspec import Meta

from continuity_runner import limits
from continuity_runner.errors import InvalidRequest

TOKEN_PATTERN = r"^[A-Za-z0-9._:-]{1,128}\Z"
RUNNER_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}\Z"
# A UTC instant: month 01-12, day 01-31, hour 00-23, minute and second 00-59 (no leap second),
# year 0001-9999, offset `Z` or `+00:00`. Days 29 to 31 are checked against the month by
# `check_time` (a pattern cannot know February).
TIME_PATTERN = (
    r"^(?!0000)\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
    r"T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|\+00:00)\Z"
)

Token = Annotated[str, Meta(pattern=TOKEN_PATTERN)]
RunnerId = Annotated[str, Meta(pattern=RUNNER_ID_PATTERN)]
Time = Annotated[str, Meta(pattern=TIME_PATTERN)]
"""Only with `check_time` in the Struct's `__post_init__`: the pattern alone passes Feb 30."""
Attempt = Annotated[int, Meta(ge=1, le=limits.MAX_ATTEMPT)]
Count = Annotated[int, Meta(ge=0, le=limits.MAX_SAFE_INT)]
"""`epoch`, `expected_revision`: never negative, exact in every runner's number type."""
ExitCode = Annotated[int, Meta(ge=-limits.MAX_SAFE_INT, le=limits.MAX_SAFE_INT)]
Name = Annotated[str, Meta(max_length=limits.NAME_CHARS)]
Signature = Annotated[str, Meta(max_length=limits.SIGNATURE_CHARS)]
Command = Annotated[str, Meta(max_length=limits.COMMAND_CHARS)]
Cursor = Annotated[str, Meta(max_length=limits.CURSOR_CHARS)]
Message = Annotated[str, Meta(max_length=limits.MESSAGE_CHARS)]
Cwd = Annotated[str, Meta(max_length=limits.PATH_CHARS)]
Output = Annotated[str, Meta(max_length=limits.OUTPUT_CHARS)]
RowId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}\Z")]
"""The id of a policy's row (`4.4.9`): what a decision's `rule` names."""
HarnessName = Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}\Z")]
"""A harness's name as the harness table spells it (`claude-code`, `codex`, ...)."""
HarnessVersion = Annotated[str, Meta(pattern=r"^[0-9A-Za-z][0-9A-Za-z.\+_-]{0,63}\Z")]
"""A harness's version as it reports it (`2.1.332`)."""


_TIME = re.compile(TIME_PATTERN)


def check_time(value: str | None, field: str) -> None:
    """Refuse `value` unless it is a real UTC instant of contract 9.8 (None passes): the pattern,
    ASCII digits only, and a day that exists in its month (2026-02-30 does not). Called by the
    `__post_init__` of the Structs that carry a runner's times, so a bad time is refused as soon
    as the Struct is made; `field` is the time's path in the message that carries it.

    The ASCII rule is stricter than the pattern: Python's `\\d` also takes other scripts'
    digits, which other runtimes (the TypeScript SDK's) do not read as a time. The services
    check times with this same function."""
    if value is None:
        return
    if not isinstance(value, str) or not value.isascii() or not _TIME.match(value):
        raise InvalidRequest(f"{field} must be an RFC 3339 UTC time (Z or +00:00)", field=field)
    if value[8:10] > "28":
        year, month, day = int(value[0:4]), int(value[5:7]), int(value[8:10])
        if day > calendar.monthrange(year, month)[1]:
            raise InvalidRequest(f"{field} is not a calendar date", field=field)


CheckpointPolicy = Literal[
    "same_session_only",
    "allow_replacement_after_governed_wait",
    "allow_replacement_after_resume_failure",
]
SessionState = Literal["active", "held", "archived", "rejected"]
Compatibility = Literal["none", "profile-ready"]
Mode = Literal["resume", "fresh"]
GenerationCheck = Literal["not_compared", "matched", "changed", "missing", "declared"]
"""How a `decide` compared the compatibility generations (never a value): `not_compared` under
compatibility `none` (and from services of an earlier release), `declared` when they differ and
an operator declared that the newer one resumes the older."""
Transcript = Literal["incremental", "full"]
ComponentName = Literal[
    "composition",
    "cwd",
    "executable",
    "mcp_servers",
    "model_route",
    "permission_mode",
    "plugins",
    "protocol",
    "reasoning_effort",
]
"""The closed names of a compatibility generation's components (`continuity_runner.harness.
compatibility` makes their digests)."""
ComponentDigests = Annotated[
    dict[ComponentName, Annotated[str, Meta(pattern=r"^[0-9a-f]{64}\Z")]], Meta(min_length=1, max_length=9)
]
"""`{name: digest}`: each component's lowercase hex SHA-256."""
SessionReason = Literal[
    "no_session",
    "session_held",
    "session_archived",
    "resume_target_rejected",
    "model_changed",
    "cwd_changed",
    "missing_cursor",
    "conversation_advanced",
    "compatibility_generation_missing",
    "compatibility_generation_changed",
]
RejectCode = Literal["resume_target_missing", "resume_target_corrupt"]

FailureClass = Literal[
    "provider_attach_refused",
    "provider_side_effect_pending",
    "source_reconciliation_required",
    "provider_state_incompatible",
    "event_replay_conflict",
    "native_session_missing",
    "context_overflow",
    "transcript_corrupt",
    "session_busy",
    "unclassified",
]
Action = Literal["retry_same_session", "open_replacement", "operator", "reconcile", "continue_fresh"]
DecisionReason = Literal[
    "native_provider_side_effect_pending",
    "native_provider_state_incompatible",
    "native_runner_source_reconciliation_required",
    "native_event_replay_conflict",
    "native_session_retry_exhausted",
    "native_session_continuity_break",
    "native_session_interrupted",
    "runner_continuity_break_archive_failed",
    "execution_reconciled",
    "operator_retry",
    "tenant_recovery_budget_exhausted",
    "native_session_missing",
    "native_context_overflow",
    "native_transcript_corrupt",
    "native_session_busy",
]
RefusalCode = Literal[
    "runner_not_registered",
    "runner_revoked",
    "tenant_not_allowed",
    "session_not_owned",
    "run_not_owned",
    "quota_exceeded",
]
"""Why an event was refused before any decision (contract 10.5); only `quota_exceeded` is not
final: the same report is sent again, with a new `event_id`, at or after `not_before`."""
QuotaScope = Literal["runner", "tenant"]
QuotaKind = Literal["event_rate", "stored_runs"]
"""Which quota a `quota_exceeded` refusal names: events a second (`not_before` within seconds)
or runs kept within the run retention (`not_before` when the oldest leaves it: hours or days)."""
RecordedOutcome = Literal["completed", "not_performed"]
ActionOutcome = Literal["completed", "not_performed", "mixed"]
