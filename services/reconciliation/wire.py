"""Wire additions of the reconciliation service, beyond contract section 6.

`continuity.runs.audit` `{"run_id"}` → `{"run_id", "items": [audit entry, ...]}`: a run's audit
trail, oldest first (404 `not_found` for an unknown run). It is separate from `runs.get` so that
`RunView` stays exactly as the contract defines it. The error codes this service adds are in
the catalogue (shared/contract/errors.py).
"""

from __future__ import annotations

from shared.contract import AuditReply
from shared.contract.subjects import RUNS_AUDIT

__all__ = ["RUNS_AUDIT", "AuditReply"]
