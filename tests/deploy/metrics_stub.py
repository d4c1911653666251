"""A stand-in scrape target: shared.metrics.MetricsServer serving the real registry after a few
known increments. Prints its port, then serves until stdin closes."""

from __future__ import annotations

import asyncio
import sys

from shared import metrics


def record_sample_traffic() -> None:
    metrics.EVENTS.labels(type="resume_failed", outcome="decided").inc(3)
    metrics.FAILURE_CLASSES.labels(**{"class": "provider_attach_refused"}).inc()
    metrics.DECISIONS.labels(action="operator", reason="native_provider_state_incompatible").inc()
    metrics.DECISIONS.labels(action="retry_same_session", reason="native_session_interrupted").inc(2)
    metrics.DECISION_LATENCY.observe(0.004)
    metrics.DECISION_LATENCY.observe(0.3)
    metrics.SESSION_DECISIONS.labels(mode="fresh", reason="no_session").inc()
    metrics.SESSION_COMMITS.labels(result="ok").inc()
    metrics.ARCHIVES.labels(result="timed_out").inc()
    metrics.ARCHIVE_DURATION.observe(1.5)
    metrics.RECONCILIATIONS_OPEN.set(2)
    metrics.RECONCILIATION_OLDEST_OPEN.set(120)
    metrics.DEAD_LETTERS.labels(reason="signature_invalid").inc()
    metrics.REDIS_ERRORS.inc()
    metrics.CONSUMER_PENDING.labels(consumer="classifier").set(7)
    metrics.REQUESTS.labels(endpoint="continuity.sessions.decide", code="ok").inc()
    metrics.REQUEST_DURATION.labels(endpoint="continuity.sessions.decide").observe(0.002)
    metrics.OUTBOX_PENDING.set(0)
    metrics.READY.set(1)


async def main() -> None:
    record_sample_traffic()
    server = metrics.MetricsServer("127.0.0.1", 0, lambda: True)
    await server.start()
    print(server.port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop()


if __name__ == "__main__":
    asyncio.run(main())
