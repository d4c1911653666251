"""The quotas every classifier replica shares in Redis (contract 10.6): event-rate buckets that
replicas lease tokens from, stored-run sets counted and checked in one step, and the storm
breaker's recovery budget taken a unit at a time; and `usage`, what a runner holds of them.

Each call is one script on one key, so each runs on one Redis Cluster slot (`shared.records.keys`
gives every key its own hash tag).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from enum import Enum
from importlib import resources
from typing import Any, Literal

from redis.exceptions import NoScriptError

from shared.contract.types import QuotaScope
from shared.platform.config import Config
from shared.platform.redis import Redis, Script
from shared.records import keys
from shared.records.retention import Retention


def _script(name: str) -> Script:
    return Script(name, resources.files("shared.records.scripts").joinpath(f"{name}.lua").read_text())


EVENT_LEASE = _script("event_lease")
"""KEYS: the bucket (`keys.runner_event_rate` or `keys.tenant_event_rate`)."""
STORED_RUN_COUNT = _script("stored_run_count")
"""KEYS: the owner's set (`keys.runner_runs` or `keys.tenant_runs`)."""
RECOVERY_BUDGET = _script("recovery_budget")
"""KEYS: the window's counter (`keys.recovery_budget`)."""


async def lease(redis: Redis, bucket: str, rate: float, burst: int, wanted: int) -> tuple[int, float]:
    """Take up to `wanted` tokens of `bucket`: (tokens granted, seconds until one is there again
    when none was)."""
    granted, wait_ms = await redis.script(EVENT_LEASE, [bucket], [repr(rate), burst, wanted])
    return int(granted), int(wait_ms) / 1000


class Counted(Enum):
    NOW = 1
    """Counted by this call."""
    BEFORE = 2
    """Already counted (another event of the run, or a redelivery)."""
    REFUSED = 0
    """The owner holds its limit; nothing counted."""
    NOT_COUNTED = 3
    """Another owner refused the run in the same script: nothing counted here."""


async def count_run(
    redis: Redis, owner: str, run_id: str, now_ms: int, run_ms: int, limit: int
) -> tuple[Counted, int]:
    """Count a new run against `owner` unless it holds `limit` runs within the retention: how,
    and, when refused, when its oldest counted run leaves the retention (ms)."""
    reply = await redis.script(STORED_RUN_COUNT, [owner], [run_id, str(now_ms), str(run_ms), str(limit)])
    return _counted(reply, run_ms)


async def count_runs(
    redis: Redis,
    owners: Sequence[tuple[str, int]],
    run_id: str,
    now_ms: int,
    run_ms: int,
    *,
    together: bool = False,
) -> list[tuple[Counted, int] | Exception]:
    """`count_run` against each (owner, limit), all sent before the first answer is awaited
    (the hot path's: one write, no task each); an owner's failure is its answer, so that the
    caller can take back what the others counted. `together` (a single server, where one
    script may touch every owner's set): one script for all owners, which counts the run
    everywhere or, when one refuses it, nowhere (the others answer `NOT_COUNTED`)."""
    return await send_counts(redis, owners, run_id, now_ms, run_ms, together=together)


def send_counts(
    redis: Redis,
    owners: Sequence[tuple[str, int]],
    run_id: str,
    now_ms: int,
    run_ms: int,
    *,
    together: bool = False,
) -> Awaitable[list[tuple[Counted, int] | Exception]]:
    """`count_runs` with its scripts sent now, when called: they go out in the same write as
    the commands sent right after (the classifier's first reads of the event)."""
    args = [run_id, str(now_ms), str(run_ms)]
    if together and len(owners) > 1:
        names, limits = [key for key, _ in owners], [str(limit) for _, limit in owners]
        whole = redis.send("EVALSHA", STORED_RUN_COUNT.sha, len(names), *names, *args, *limits)

        async def together_answers() -> list[tuple[Counted, int] | Exception]:
            try:
                try:
                    replies = await redis.reply(whole)
                except NoScriptError:  # a server that restarted: sent whole, once
                    replies = await redis.script(STORED_RUN_COUNT, names, [*args, *limits])
            except Exception as exc:
                return [exc for _ in owners]
            return [_counted(reply, run_ms) for reply in replies]

        return together_answers()
    sent = [redis.send("EVALSHA", STORED_RUN_COUNT.sha, 1, key, *args, str(limit)) for key, limit in owners]

    async def answers_of() -> list[tuple[Counted, int] | Exception]:
        answers: list[tuple[Counted, int] | Exception] = []
        for (key, limit), answer in zip(owners, sent, strict=True):
            try:
                try:
                    reply = await redis.reply(answer)
                except NoScriptError:  # a server that restarted: sent whole, once
                    reply = await redis.script(STORED_RUN_COUNT, [key], [*args, str(limit)])
                answers.append(_counted(reply, run_ms))
            except Exception as exc:
                answers.append(exc)
        return answers

    return answers_of()


def _counted(reply: list[Any], run_ms: int) -> tuple[Counted, int]:
    outcome = Counted(int(reply[0]))
    return outcome, (int(float(reply[1])) + run_ms if outcome is Counted.REFUSED else 0)


BudgetMove = Literal["take", "force", "give_back"]


async def recovery(
    redis: Redis, counter: str, move: BudgetMove, budget: int, window_ms: int
) -> tuple[bool, int]:
    """Take a unit of a window's recovery budget while one is left (`take`), whatever is left
    (`force`), or give one back (`give_back`): whether it moved, and the count after it."""
    moved, spent = await redis.script(RECOVERY_BUDGET, [counter], [move, str(budget), str(window_ms)])
    return bool(moved), int(spent)


@dataclass(frozen=True, slots=True)
class Usage:
    """What one owner (a runner, or a tenant) holds of its quotas now."""

    scope: QuotaScope
    owner: str
    event_rate: float
    event_burst: int
    tokens_left: float
    """Whole and partial tokens in the shared bucket now; tokens replicas leased and have not
    spent yet are outside it (at most a lease per replica)."""
    stored_runs: int
    """Runs counted within the retention."""
    stored_runs_limit: int

    @property
    def events_spent(self) -> float:
        """Events the bucket has let through and not yet regained: what the owner sent lately
        above its rate, up to the burst."""
        return self.event_burst - self.tokens_left


async def usage(redis: Redis, config: Config, runner_id: str, tenant: str | None = None) -> list[Usage]:
    """The runner's usage against its quotas, and its tenant's when `tenant` is given (one
    round trip, nothing written): for an operator's view."""
    run_ms = Retention.from_config(config).run_ms
    owners: list[tuple[QuotaScope, str, str, str, float, int, int]] = [
        (
            "runner",
            runner_id,
            keys.runner_event_rate(runner_id),
            keys.runner_runs(runner_id),
            config.runner_event_rate,
            config.runner_event_burst,
            config.runner_stored_runs,
        )
    ]
    if tenant is not None:
        owners.append(
            (
                "tenant",
                tenant,
                keys.tenant_event_rate(tenant),
                keys.tenant_runs(tenant),
                config.tenant_event_rate,
                config.tenant_event_burst,
                config.tenant_stored_runs,
            )
        )
    clock = await redis.execute("TIME")
    now_ms = int(clock[0]) * 1000 + int(clock[1]) // 1000
    commands = []
    for _, _, bucket, runs, *_ in owners:
        commands += [("HMGET", bucket, "tokens", "at"), ("ZCOUNT", runs, str(now_ms - run_ms), "+inf")]
    replies = await redis.batch(commands)
    found = []
    for i, (scope, owner, _, _, rate, burst, limit) in enumerate(owners):
        (tokens, at), stored = replies[2 * i], replies[2 * i + 1]
        left = float(burst)
        if tokens is not None and at is not None:
            left = min(float(burst), float(tokens) + max(0, now_ms - int(at)) * rate / 1000)
        found.append(Usage(scope, owner, rate, burst, left, int(stored), limit))
    return found
