"""The store: one `Redis` client over a single server or a Redis Cluster (`store`), on
auto-pipelined connections (`pipeline`) routed by hash slot (`slots`)."""

from shared.platform.redis.store import TRANSIENT_REDIS_ERRORS, Redis, Script

__all__ = ["TRANSIENT_REDIS_ERRORS", "Redis", "Script"]
