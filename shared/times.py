"""RFC 3339 UTC timestamps, as the contract writes them (`2026-11-30T12:00:00.123Z`)."""

from __future__ import annotations

import time


def now_rfc3339() -> str:
    return rfc3339_from_epoch(time.time())


_last_second: tuple[int, str] = (-1, "")


def rfc3339_from_epoch(seconds: float) -> str:
    # This runs several times per event: the formatted second is kept until the next one.
    global _last_second
    whole = int(seconds)
    millis = int((seconds - whole) * 1000)
    second, text = _last_second
    if second != whole:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        _last_second = (whole, text)
    return f"{text}.{millis:03d}Z"
