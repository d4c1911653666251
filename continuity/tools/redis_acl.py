"""The services' Redis users: one per service, with only the commands its code sends (its own
and those of the Lua scripts it runs) and only the keys of `shared.records.keys` it touches.

`python -m continuity.tools.redis_acl` writes `deploy/redis/users.acl` from `USERS` (the file is
checked in; `tests/security/test_redis_acl.py` fails while it differs from what this writes).
In that file every user is `off` with no password, and `default` is off too: no connection
signs in before `deploy/redis/complete-acl.sh` turns each user on with the SHA-256 of its
password (compose's `secrets` service, the dev overlay's Redis and `docs/operations/deploy.md`
run it). What no user may do, whatever the list below says: administer the server (CONFIG,
ACL, SHUTDOWN, REPLICAOF, DEBUG, MODULE, MONITOR, SAVE, FLUSHALL, KEYS, SCRIPT FLUSH, ...).

The lists are read from the code: the store classes of each service (`services/<name>/store.py`
and the parts of `shared.records` it uses) and the `redis.call`s of the scripts
(`shared/records/scripts/*.lua`, each with `lib.lua`'s helpers when loaded with them). The
security test runs the real services against a Redis loaded with the file and fails on any
refused command (Redis's `ACL LOG`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from shared.records import keys

ROOT = Path(__file__).resolve().parents[2]
ACL_FILE = ROOT / "deploy" / "redis" / "users.acl"

FORBIDDEN = frozenset(
    {
        "acl", "bgrewriteaof", "bgsave", "client", "config", "debug", "failover", "flushall",
        "flushdb", "keys", "migrate", "module", "monitor", "psync", "replconf", "replicaof",
        "restore", "save", "shutdown", "slaveof", "sync", "swapdb",
    }
)  # fmt: skip
"""Commands no service is given (nor a subcommand of them): checked by the tests."""


def _star(key: Callable[..., str], arity: int) -> str:
    """The pattern of every key `key` makes: each of its arguments a `*`."""
    return key(*(cast(Any, "*") for _ in range(arity)))


CONNECTION = (
    "ping",  # readiness
    "info",  # CONTINUITY_REDIS_CLUSTER=auto asks `INFO cluster` once
    "select",  # a database other than 0 in REDIS_URL
    "cluster|slots",  # Redis Cluster: the slot table
    "cluster|info",  # Redis Cluster: readiness
    "asking",  # Redis Cluster: an ASK redirect
    "evalsha",  # every atomic step is a script, run by its digest ...
    "eval",  # ... and sent whole once when the server does not have it (NOSCRIPT)
)
"""What every service's connection sends, whatever it stores."""

LIB = ("hget", "hmget", "hset", "persist", "pexpire", "rpush")
"""The commands of `lib.lua`, loaded before every step script."""

OUTBOX = ("scan", "hgetall", "hdel")
"""The outbox sweeper (shared/records/outbox.py): SCAN of `continuity:outbox:*`, then each."""

STEP_KEYS = (
    _star(keys.run, 2),
    _star(keys.run_decisions, 2),
    _star(keys.outbox, 1),
    _star(keys.run_audit, 2),
    _star(keys.session, 1),
    _star(keys.reconciliation, 2),  # and its history, `<that>:history`
    _star(keys.run_index, 1),
)
"""The keys of a run step (`shared.records.scripts.step_keys`) and the run index beside it."""

RECONCILIATION_LISTING = (
    tuple(
        key(bucket)
        for bucket in range(keys.RECONCILIATION_BUCKETS)
        for key in (keys.reconciliations_open, keys.reconciliations_delivered)
    )
    + keys.LEGACY_RECONCILIATION_INDEXES
)

RUNS_INDEX = (
    _star(keys.runs_index_versions, 1),
    _star(keys.runs_index_entries, 1),
    _star(keys.runs_index_listing, 1),
    keys.runs_index_listing(cast(Any, "*"), "*"),
)


@dataclass(frozen=True)
class User:
    name: str
    commands: tuple[str, ...]
    keys: tuple[str, ...]
    why: str
    read_keys: tuple[str, ...] = ()
    """Keys it may read and not write (`%R~`, Redis 7.0)."""

    def line(self) -> str:
        """Its line of the ACL file: off, no password, then exactly its keys and commands."""
        patterns = " ".join([*(f"~{p}" for p in self.keys), *(f"%R~{p}" for p in self.read_keys)])
        allowed = " ".join(f"+{command}" for command in sorted(set(self.commands)))
        return f"user {self.name} off resetpass resetkeys resetchannels {patterns} -@all {allowed}"


USERS = (
    User(
        "classifier",
        (
            *CONNECTION,
            *LIB,
            *OUTBOX,
            # The run claim and its index (shared/records/store.py): SET NX GET PX, DEL.
            "set",
            "del",
            "get",
            # record_step.lua
            "pttl",
            # The tenant's recovery budget (shared/records/scripts/recovery_budget.lua).
            "incr",
            "decr",
            # Stored-run quotas (shared/records/scripts/stored_run_count.lua).
            "zremrangebyscore",
            "zscore",
            "zcard",
            "zadd",
            "zrange",
            "zrem",
            # Event-rate leases (shared/records/scripts/event_lease.lua): the server's clock.
            "time",
        ),
        (
            *STEP_KEYS,
            _star(keys.recovery_budget, 2),
            _star(keys.runner_runs, 1),
            _star(keys.tenant_runs, 1),
            _star(keys.runner_event_rate, 1),
            _star(keys.tenant_event_rate, 1),
        ),
        "decides events: reads sessions, records run steps, counts quotas and recovery budgets",
        read_keys=(_star(keys.runner, 1),),  # the runner directory: the session-store writes it
    ),
    User(
        "session-store",
        (
            *CONNECTION,
            # session_commit.lua, session_owner.lua, session_reject.lua
            "hmget",
            "hset",
            "hdel",
            "copy",
            "lpush",
            "ltrim",
            "pexpire",
            "lrange",
            # The compatibility declarations (shared/records/compatibility.py and its script).
            "hget",
            "hgetall",
            "hsetnx",
            # The runner directory (shared/records/runners.py).
            "get",
            "set",
            "sadd",
            "smembers",
            # The rollout preview reads every saved session (services/session_store/preview.py).
            "scan",
            # CONTINUITY_REDIS_WAIT_REPLICAS: WAIT after a commit.
            "wait",
            # `runners list`: each runner's usage of its quotas (shared/records/quotas.py).
            "time",
            "zcount",
        ),
        (
            _star(keys.session, 1),
            _star(keys.held_archive, 2),
            _star(keys.session_ownership, 1),
            keys.compatibility_declarations(),
            keys.compatibility_audit(),
            _star(keys.runner, 1),
            keys.RUNNERS_INDEX,
            keys.RUNNERS_AUDIT,
        ),
        "answers runners' and operators' session requests; keeps the runner directory",
        # The quotas' counts, read for `runners list`: the classifier writes them.
        read_keys=(
            _star(keys.runner_runs, 1),
            _star(keys.tenant_runs, 1),
            _star(keys.runner_event_rate, 1),
            _star(keys.tenant_event_rate, 1),
        ),
    ),
    User(
        "archiver",
        (
            *CONNECTION,
            *LIB,
            *OUTBOX,
            # record_step.lua, archive_local_move.lua, archive_begin.lua, archive_result.lua
            "pttl",
            "copy",
            "exists",
            "hexists",
            "time",
            # The run index (shared/records/store.py).
            "set",
            "get",
        ),
        (
            *STEP_KEYS,
            _star(keys.archive_copy, 2),  # and the held archives, `...:held:<native id>`
            _star(keys.archive_progress, 2),
        ),
        "moves archived sessions and records the archive's run steps",
    ),
    User(
        "reconciliation",
        (
            *CONNECTION,
            *LIB,
            *OUTBOX,
            # reconciliation_open.lua, _resolve.lua, _retry.lua, record_step.lua
            "del",
            "exists",
            "hexists",
            "pttl",
            # reconciliation_index_put.lua and the listing (services/reconciliation/store.py).
            "zadd",
            "zrem",
            "zrange",
            "zrangebyscore",
            # runs_index_*.lua and the runs index (services/reconciliation/runs_index.py).
            # The run index, audit trails and replays (shared/records/store.py, replay.py).
            "get",
            "set",
            "lrange",
            # history_moved.lua: the audit length copied (shared/records/history.py).
            "llen",
        ),
        (
            *STEP_KEYS,
            # history_moved.lua gives a finished run's archive progress the linger.
            _star(keys.archive_progress, 2),
            *RECONCILIATION_LISTING,
            *RUNS_INDEX,
        ),
        "records operators' resolutions and retries, keeps the reconciliation and runs indexes",
    ),
    User(
        "probe",
        ("ping",),
        (),
        "the health checks of compose's and the dev overlay's Redis: PING, nothing else",
    ),
)
"""The console keeps nothing in Redis and has no user (ServiceSpec.stores)."""

SERVICE_USERS = tuple(user.name for user in USERS if user.name != "probe")

DEFAULT_LINE = "user default off resetpass resetkeys resetchannels -@all"
"""`default`, every connection before AUTH, can do nothing."""


def render() -> str:
    """The ACL file: `default`, then each service's user (Redis reads no comments in it; the
    reasons are here, in `User.why`)."""
    return "\n".join([DEFAULT_LINE, *(user.line() for user in USERS)]) + "\n"


def main() -> int:
    ACL_FILE.parent.mkdir(parents=True, exist_ok=True)
    ACL_FILE.write_text(render())
    print(f"wrote {ACL_FILE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
