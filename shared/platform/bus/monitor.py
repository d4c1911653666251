"""The system account's `monitor` user: the session-store's read-only view of the NATS servers
(services/session_store/presence.py). Its name, its inbox and its permissions live here, one
home for the service that connects as it and for the layouts that define it
(continuity.natsauth.layout, deploy/nats/auth.conf)."""

from __future__ import annotations

from typing import Any

MONITOR_USER = "monitor"
MONITOR_INBOX = "_INBOX.monitor"
MONITOR_RULES: dict[str, Any] = {
    "publish": {"allow": ["$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP"]},
    "subscribe": {"allow": ["$SYS.SERVER.*.CLIENT.AUTH.ERR", f"{MONITOR_INBOX}.>"]},
}
"""What it may do: ask every server for its connections, look up an
account's JWT (public claims), hear the servers' authentication failures, read its own
inbox. Nothing it may do changes a server; deploy/nats/auth.conf gives its user the same."""
