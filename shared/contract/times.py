"""RFC 3339 UTC timestamps, as the contract writes them (`2026-11-30T12:00:00.123Z`)."""

from __future__ import annotations

import time
from datetime import datetime


def now_rfc3339() -> str:
    return rfc3339_from_epoch(time.time())


_SECONDS_KEPT = 8
_formatted: dict[int, str] = {}


def rfc3339_from_epoch(seconds: float) -> str:
    # This runs several times per event, for now and for a retry's time a few seconds ahead:
    # the last few formatted seconds are kept, so both are found again.
    whole = int(seconds)
    millis = int((seconds - whole) * 1000)
    text = _formatted.get(whole)
    if text is None:
        if len(_formatted) >= _SECONDS_KEPT:
            _formatted.clear()
        text = _formatted[whole] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{text}.{millis:03d}Z"


def epoch_of(rfc3339: str) -> float:
    """The instant of a contract time, in seconds since the epoch."""
    return datetime.fromisoformat(rfc3339).timestamp()
