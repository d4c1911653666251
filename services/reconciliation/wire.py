"""Wire additions of the reconciliation service, beyond contract section 6.

`continuity.runs.audit` `{"run_id"}` → `{"run_id", "items": [audit entry, ...]}`: a run's audit
trail, oldest first (404 `not_found` for an unknown run). It is separate from `runs.get` so that
`RunView` stays exactly as the contract defines it.
"""

from __future__ import annotations

import msgspec

from shared.records import AuditEntry

RUNS_AUDIT = "continuity.runs.audit"


class AuditReply(msgspec.Struct, kw_only=True):
    run_id: str
    items: list[AuditEntry]


# Error codes of this service, beyond the contract's `not_found`, `reconciliation_required`,
# `execution_reconciliation_conflict` and `execution_reconciliation_already_delivered`.
RUN_NOT_STOPPED = "run_not_stopped"
OPERATOR_RETRY_ALREADY_DELIVERED = "operator_retry_already_delivered"
RUN_CHANGED = "run_changed"
