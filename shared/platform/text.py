"""Text for people that both the `continuity` command and the console show."""

from __future__ import annotations

from datetime import UTC, datetime


def age(rfc3339: str, now: datetime | None = None) -> str:
    """How long ago `rfc3339` was, in one unit (`45s`, `12m`, `5h`, `3d`); `-` for a time that
    cannot be read."""
    try:
        then = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
