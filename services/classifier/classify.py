"""The closed failure classes (contract 4.3): from authenticated or typed fields only.

The inputs here are views that carry no message text: `TypedError` keeps an error's type and
code and nothing else, and `Evidence.authenticated_classification` is filled only from a command
result whose signature verified. `error.message` cannot reach a classification because no value
in this module has it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.contract.events import ErrorInfo
from shared.contract.types import ClassSource, FailureClass

# command_result.classification (authenticated) -> class. The harness classes (the last four)
# come from a runner's harness adapter, which reads the harness's own outcome and whose result
# the runner signs: they have no error code, and a message naming them is never read.
CLASS_BY_CLASSIFICATION: dict[str, FailureClass] = {
    "provider_attach_refused": "provider_attach_refused",
    "provider_side_effect_pending": "provider_side_effect_pending",
    "native_session_missing": "native_session_missing",
    "context_overflow": "context_overflow",
    "transcript_corrupt": "transcript_corrupt",
    "session_busy": "session_busy",
}

# error.code (typed) -> class; the source-reconciliation family is matched by shape below.
CLASS_BY_ERROR_CODE: dict[str, FailureClass] = {
    "runner_remote_provider_artifact_incompatible": "provider_state_incompatible",
    "native_event_replay_conflict": "event_replay_conflict",
}

SOURCE_RECONCILIATION_PREFIX = "native_runner_source_"
SOURCE_RECONCILIATION_SUFFIX = "_reconciliation_required"


@dataclass(frozen=True, slots=True)
class TypedError:
    """A runner error without its message: the only form of an error the classifier holds."""

    type: str
    code: str

    @classmethod
    def of(cls, error: ErrorInfo | None) -> TypedError | None:
        return None if error is None else cls(type=error.type, code=error.code)


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a class may be read from.

    `authenticated_classification` is the command result's classification, set only after its
    signature verified (an unverified result quarantines the event before classification).
    """

    authenticated_classification: str | None
    error: TypedError | None


def is_source_reconciliation_code(code: str) -> bool:
    """`native_runner_source_<part>_reconciliation_required`, for any part.

    The bare `native_runner_source_reconciliation_required` also matches (prefix and suffix
    overlap): erring towards a closed class is the safe side, as it never reaches replacement.
    """
    return code.startswith(SOURCE_RECONCILIATION_PREFIX) and code.endswith(SOURCE_RECONCILIATION_SUFFIX)


def classify(evidence: Evidence) -> tuple[FailureClass, ClassSource]:
    """Contract 4.3, row by row, and the field the class was read from; anything else, or
    nothing, is `unclassified`."""
    if evidence.authenticated_classification is not None:
        by_result = CLASS_BY_CLASSIFICATION.get(evidence.authenticated_classification)
        if by_result is not None:
            return by_result, "command_result"
    if evidence.error is not None:
        code = evidence.error.code
        if is_source_reconciliation_code(code):
            return "source_reconciliation_required", "error_code"
        by_code = CLASS_BY_ERROR_CODE.get(code)
        if by_code is not None:
            return by_code, "error_code"
    return "unclassified", "none"
