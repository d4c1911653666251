"""When a session write counts as held: Redis `WAIT` (replicas received it) and `WAITAOF` (the
master's own append-only file, and replicas' ones, fsynced it), sent right behind the write on
its connection, and whether the server can do what is asked (checked at connection).

A write whose counts are not met within the timeout is not undone (Redis cannot): it is answered
as an outage, retryable, and the record carries a marker (`UNCONFIRMED`) until a later write is
confirmed, so that a read does not show it as settled (`services/session_store/store.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from shared.platform.config import Config, ConfigError

UNCONFIRMED = "unconfirmed"
"""The session record's field holding the token of a write not yet confirmed held."""

_WAITAOF_SINCE = (7, 2)
"""The first Redis release with WAITAOF; every Valkey release has it."""

_VERSION = re.compile(r"^redis_version:(\d+)\.(\d+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Durability:
    """What must hold a session write before it is acknowledged; all 0: nothing waited for."""

    replicas: int = 0
    """WAIT numreplicas: replicas that received the write (CONTINUITY_REDIS_WAIT_REPLICAS)."""
    aof_local: int = 0
    """WAITAOF numlocal, 0 or 1: the master fsynced it to its append-only file."""
    aof_replicas: int = 0
    """WAITAOF numreplicas: replicas that fsynced it to theirs."""
    timeout_ms: int = 200
    """How long each wait may take (CONTINUITY_REDIS_WAIT_TIMEOUT_MS)."""

    @classmethod
    def from_config(cls, config: Config) -> Durability:
        return cls(
            replicas=config.redis_wait_replicas,
            aof_local=config.redis_wait_aof_local,
            aof_replicas=config.redis_wait_aof_replicas,
            timeout_ms=config.redis_wait_timeout_ms,
        )

    @property
    def waits(self) -> bool:
        """Whether a write is waited for at all (and marked until it is confirmed)."""
        return bool(self.replicas or self.aof_local or self.aof_replicas)

    @property
    def uses_waitaof(self) -> bool:
        return bool(self.aof_local or self.aof_replicas)

    def commands(self) -> list[tuple[Any, ...]]:
        """What follows the write on its connection: WAIT, WAITAOF, or both."""
        sent: list[tuple[Any, ...]] = []
        if self.replicas:
            sent.append(("WAIT", self.replicas, self.timeout_ms))
        if self.uses_waitaof:
            sent.append(("WAITAOF", self.aof_local, self.aof_replicas, self.timeout_ms))
        return sent

    def shortfall(self, replies: list[Any]) -> str | None:
        """None when the replies of `commands()` meet every count; else what fell short, in
        words that name no key and no value."""
        replies = list(replies)
        if self.replicas:
            acked = int(replies.pop(0))
            if acked < self.replicas:
                return f"{acked} of {self.replicas} replicas received the write"
        if self.uses_waitaof:
            local, remote = (int(n) for n in replies.pop(0))
            if local < self.aof_local:
                return "the master has not fsynced the write to its append-only file"
            if remote < self.aof_replicas:
                return f"{remote} of {self.aof_replicas} replicas fsynced the write"
        return None

    def refusal(self, info_server: str, info_persistence: str) -> str | None:
        """Why the server (its `INFO server` and `INFO persistence`) cannot do what is asked;
        None when it can."""
        if not self.uses_waitaof:
            return None
        found = _VERSION.search(info_server)
        version = (int(found[1]), int(found[2])) if found else (0, 0)
        if "valkey_version:" not in info_server and version < _WAITAOF_SINCE:
            shown = f"{version[0]}.{version[1]}" if found else "unknown"
            return (
                "CONTINUITY_REDIS_WAIT_AOF_LOCAL / CONTINUITY_REDIS_WAIT_AOF_REPLICAS ask for WAITAOF, "
                f"which this Redis server (version {shown}) does not have: it needs Redis 7.2 or "
                "later, or Valkey; set both to 0 or upgrade the server"
            )
        if self.aof_local and "aof_enabled:1" not in info_persistence:
            return (
                "CONTINUITY_REDIS_WAIT_AOF_LOCAL=1 needs the append-only file, and this Redis "
                "server runs without it (appendonly no): turn it on or set the variable to 0"
            )
        return None

    def check(self, info_server: str, info_persistence: str) -> None:
        """Raise `ConfigError` when the server cannot do what is asked."""
        reason = self.refusal(info_server, info_persistence)
        if reason is not None:
            raise ConfigError(reason)


NONE = Durability()
"""Nothing waited for: a write is acknowledged once the master ran it."""
