"""Wire additions of the reconciliation service, beyond contract section 6.

`continuity.runs.audit` `{"run_id"}` → `{"run_id", "items": [audit entry, ...]}`: a run's audit
trail, oldest first (404 `not_found` for an unknown run). It is separate from `runs.get` so that
`RunView` stays exactly as the contract defines it.
"""

from __future__ import annotations

from shared.contracts import AuditReply
from shared.subjects import RUNS_AUDIT

__all__ = ["OPERATOR_RETRY_ALREADY_DELIVERED", "RUNS_AUDIT", "RUN_CHANGED", "RUN_NOT_STOPPED", "AuditReply"]

# Error codes of this service, beyond the contract's `not_found`, `reconciliation_required`,
# `execution_reconciliation_conflict` and `execution_reconciliation_already_delivered`.
RUN_NOT_STOPPED = "run_not_stopped"
OPERATOR_RETRY_ALREADY_DELIVERED = "operator_retry_already_delivered"
RUN_CHANGED = "run_changed"
