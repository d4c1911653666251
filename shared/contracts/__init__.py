"""msgspec Structs for every message of the wire contract, version 1."""

from shared.contracts.archive import ArchiveCommand, ArchiveResult
from shared.contracts.decisions import ArchiveWork, Decision, ReconcileWork
from shared.contracts.errors import ErrorBody, ErrorDetail, ServiceError
from shared.contracts.events import CommandResult, ErrorInfo, ResumeFailed, ToolCall
from shared.contracts.reconciliation import (
    AuditEntry,
    AuditReply,
    DeliveredReply,
    ListReply,
    ListRequest,
    ReconciliationRecord,
    Resolution,
    ResolveRequest,
    RetryRequest,
    RunRequest,
    RunView,
    ToolCallRecord,
)
from shared.contracts.session import SessionRef
from shared.contracts.sessions import (
    CommitReply,
    CommitRequest,
    DecideReply,
    DecideRequest,
    GetRequest,
    RejectReply,
    RejectRequest,
    SessionView,
)

__all__ = [
    "ArchiveCommand",
    "ArchiveResult",
    "ArchiveWork",
    "AuditEntry",
    "AuditReply",
    "CommandResult",
    "CommitReply",
    "CommitRequest",
    "DecideReply",
    "DecideRequest",
    "Decision",
    "DeliveredReply",
    "ErrorBody",
    "ErrorDetail",
    "ErrorInfo",
    "GetRequest",
    "ListReply",
    "ListRequest",
    "ReconcileWork",
    "ReconciliationRecord",
    "RejectReply",
    "RejectRequest",
    "Resolution",
    "ResolveRequest",
    "ResumeFailed",
    "RetryRequest",
    "RunRequest",
    "RunView",
    "ServiceError",
    "SessionRef",
    "SessionView",
    "ToolCall",
    "ToolCallRecord",
]
