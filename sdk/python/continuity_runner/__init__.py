"""Continuity's runner SDK: contract v1 over NATS.

```python
runner = await connect(RunnerOptions(runner_id="runner-a", servers="nats://nats:4222"))
reply = await runner.decide(session, "codex", model, cwd, latest_cursor=cursor)
```
"""

from continuity_runner.contract import (
    ArchiveRequest,
    ArchiveResult,
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
    RejectReply,
    RejectRequest,
    ResumeFailed,
    SessionRef,
    SessionView,
    ToolCall,
)
from continuity_runner.delivery import Delivery
from continuity_runner.errors import (
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
    RunNotStopped,
    SessionHeld,
    StaleEpoch,
    Unavailable,
)
from continuity_runner.options import RunnerOptions
from continuity_runner.runner import ArchiveHandler, DecisionHandler, Runner, connect

__all__ = [
    "ArchiveHandler",
    "ArchiveRequest",
    "ArchiveResult",
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
    "InternalError",
    "InvalidRequest",
    "NotFound",
    "OperatorRetryAlreadyDelivered",
    "PermissionDenied",
    "ReconciliationAlreadyDelivered",
    "ReconciliationConflict",
    "ReconciliationRequired",
    "RejectReply",
    "RejectRequest",
    "ResumeFailed",
    "RevisionConflict",
    "RunChanged",
    "RunNotStopped",
    "Runner",
    "RunnerOptions",
    "SessionHeld",
    "SessionRef",
    "SessionView",
    "StaleEpoch",
    "ToolCall",
    "Unavailable",
    "connect",
]
