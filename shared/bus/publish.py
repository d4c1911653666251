"""JetStream publication with de-duplication ids, and dead letters."""

from __future__ import annotations

from nats.js import JetStreamContext

from shared import metrics
from shared.times import now_rfc3339

DEAD_REASON_HEADER = "Continuity-Dead-Reason"
DEAD_SUBJECT_HEADER = "Continuity-Original-Subject"
DEAD_SERVICE_HEADER = "Continuity-Service"
DEAD_AT_HEADER = "Continuity-Dead-At"


async def publish(
    js: JetStreamContext, subject: str, payload: bytes, msg_id: str, timeout: float = 5.0
) -> None:
    """Publish once: JetStream drops a re-send with the same `Nats-Msg-Id` in its window."""
    await js.publish(subject, payload, timeout=timeout, headers={"Nats-Msg-Id": msg_id})


async def dead_letter(
    js: JetStreamContext,
    dead_subject: str,
    *,
    reason: str,
    original_subject: str,
    payload: bytes,
    msg_id: str,
    service: str,
) -> None:
    """Keep the original bytes (nothing is lost) with a closed, sanitized reason in headers."""
    headers = {
        "Nats-Msg-Id": msg_id,
        DEAD_REASON_HEADER: reason,
        DEAD_SUBJECT_HEADER: original_subject,
        DEAD_SERVICE_HEADER: service,
        DEAD_AT_HEADER: now_rfc3339(),
    }
    await js.publish(dead_subject, payload, timeout=5.0, headers=headers)
    metrics.DEAD_LETTERS.labels(reason=reason).inc()
