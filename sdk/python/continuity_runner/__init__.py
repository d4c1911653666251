"""Continuity's runner SDK: contract v1 over NATS.

```python
runner = await connect(RunnerOptions(runner_id="runner-a", servers="nats://nats:4222"))
reply = await runner.decide(session, "codex", model, cwd, latest_cursor=cursor)
await runner.handle_decisions(follow, on_refusal=refused)
# after a decision, once the session completed a turn (contract 4.6):
await runner.report_turn_completed(run_id, decision.attempt, session, native_session_id)
```
"""

from continuity_runner import tracing
from continuity_runner.contract import (
    ArchiveRequest,
    ArchiveResult,
    ClaimRequest,
    CommandResult,
    CommitReply,
    CommitRequest,
    DecideReply,
    DecideRequest,
    Decision,
    ErrorBody,
    ErrorDetail,
    ErrorInfo,
    GetRequest,
    HarnessInfo,
    OwnershipReply,
    Refusal,
    RejectReply,
    RejectRequest,
    ResumeFailed,
    SessionRef,
    SessionView,
    ToolCall,
    TurnCompleted,
)
from continuity_runner.delivery import Delivery
from continuity_runner.errors import (
    ClaimRefused,
    Conflict,
    ContinuityError,
    InternalError,
    InvalidRequest,
    NotFound,
    OperatorRetryAlreadyDelivered,
    PermissionDenied,
    ReconciliationAlreadyDelivered,
    ReconciliationConflict,
    ReconciliationRequired,
    RevisionConflict,
    RunChanged,
    RunnerNotIssued,
    RunNotStopped,
    SessionHeld,
    SessionNotOwned,
    StaleEpoch,
    Unavailable,
)
from continuity_runner.options import RunnerOptions
from continuity_runner.runner import ArchiveHandler, DecisionHandler, RefusalHandler, Runner, connect

__all__ = [
    "ArchiveHandler",
    "ArchiveRequest",
    "ArchiveResult",
    "ClaimRefused",
    "ClaimRequest",
    "CommandResult",
    "CommitReply",
    "CommitRequest",
    "Conflict",
    "ContinuityError",
    "DecideReply",
    "DecideRequest",
    "Decision",
    "DecisionHandler",
    "Delivery",
    "ErrorBody",
    "ErrorDetail",
    "ErrorInfo",
    "GetRequest",
    "HarnessInfo",
    "InternalError",
    "InvalidRequest",
    "NotFound",
    "OperatorRetryAlreadyDelivered",
    "OwnershipReply",
    "PermissionDenied",
    "ReconciliationAlreadyDelivered",
    "ReconciliationConflict",
    "ReconciliationRequired",
    "Refusal",
    "RefusalHandler",
    "RejectReply",
    "RejectRequest",
    "ResumeFailed",
    "RevisionConflict",
    "RunChanged",
    "RunNotStopped",
    "Runner",
    "RunnerNotIssued",
    "RunnerOptions",
    "SessionHeld",
    "SessionNotOwned",
    "SessionRef",
    "SessionView",
    "StaleEpoch",
    "ToolCall",
    "TurnCompleted",
    "Unavailable",
    "connect",
    "tracing",
]
