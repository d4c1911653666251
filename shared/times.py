"""RFC 3339 UTC timestamps, as the contract writes them (`2026-11-30T12:00:00.123Z`)."""

from __future__ import annotations

import time


def now_rfc3339() -> str:
    return rfc3339_from_epoch(time.time())


def rfc3339_from_epoch(seconds: float) -> str:
    # time.strftime is several times cheaper than datetime.isoformat, and this runs per event.
    whole = int(seconds)
    millis = int((seconds - whole) * 1000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(whole))}.{millis:03d}Z"
