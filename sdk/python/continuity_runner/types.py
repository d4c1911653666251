"""Constrained scalar types of contract v1 (section 1).

Patterns end in `\\Z`, not `$`: Python's `$` also matches before a trailing newline, and a
value with a newline must fail decoding.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

TOKEN_PATTERN = r"^[A-Za-z0-9._:-]{1,128}\Z"
RUNNER_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}\Z"
TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})\Z"

Token = Annotated[str, Meta(pattern=TOKEN_PATTERN)]
RunnerId = Annotated[str, Meta(pattern=RUNNER_ID_PATTERN)]
Time = Annotated[str, Meta(pattern=TIME_PATTERN)]
Attempt = Annotated[int, Meta(ge=1)]

CheckpointPolicy = Literal[
    "same_session_only",
    "allow_replacement_after_governed_wait",
    "allow_replacement_after_resume_failure",
]
SessionState = Literal["active", "held", "archived", "rejected"]
Compatibility = Literal["none", "profile-ready"]
Mode = Literal["resume", "fresh"]
Transcript = Literal["incremental", "full"]
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
]
RecordedOutcome = Literal["completed", "not_performed"]
ActionOutcome = Literal["completed", "not_performed", "mixed"]
