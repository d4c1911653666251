"""The pure rules of session durability: what follows a write (WAIT, WAITAOF), when their replies
meet the counts, which servers can do what is asked, the settings that ask it, and NOREPLICAS
answered as an outage."""

from __future__ import annotations

import pytest

from shared.platform.config import Config, ConfigError
from shared.platform.redis import TRANSIENT_REDIS_ERRORS
from shared.platform.redis.durability import NONE, Durability
from shared.platform.redis.pipeline import NotEnoughReplicas, _response_error

REDIS_70 = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"
REDIS_72 = "# Server\r\nredis_version:7.2.4\r\n"
REDIS_8 = "# Server\r\nredis_version:8.0.2\r\n"
VALKEY = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n"
AOF_ON = "# Persistence\r\naof_enabled:1\r\n"
AOF_OFF = "# Persistence\r\naof_enabled:0\r\n"


def test_nothing_asked_sends_nothing_and_marks_nothing() -> None:
    assert NONE.commands() == [] and not NONE.waits
    assert NONE.shortfall([]) is None
    assert NONE.refusal(REDIS_70, AOF_OFF) is None


def test_the_commands_that_follow_a_write() -> None:
    assert Durability(replicas=1, timeout_ms=200).commands() == [("WAIT", 1, 200)]
    assert Durability(aof_local=1, timeout_ms=50).commands() == [("WAITAOF", 1, 0, 50)]
    both = Durability(replicas=2, aof_local=1, aof_replicas=1, timeout_ms=9)
    assert both.commands() == [("WAIT", 2, 9), ("WAITAOF", 1, 1, 9)]
    assert both.waits and both.uses_waitaof


@pytest.mark.parametrize(
    ("durability", "replies", "short"),
    [
        (Durability(replicas=1), [1], None),
        (Durability(replicas=1), [2], None),
        (Durability(replicas=2), [1], "1 of 2 replicas received the write"),
        (Durability(aof_local=1), [[1, 0]], None),
        (Durability(aof_local=1), [[0, 0]], "the master has not fsynced the write to its append-only file"),
        (Durability(aof_replicas=1), [[0, 1]], None),
        (Durability(aof_local=1, aof_replicas=2), [[1, 1]], "1 of 2 replicas fsynced the write"),
        (Durability(replicas=1, aof_local=1), [1, [1, 0]], None),
        (Durability(replicas=1, aof_local=1), [0, [1, 0]], "0 of 1 replicas received the write"),
        (Durability(replicas=1, aof_local=1), [1, [0, 0]], "the master has not fsynced"),
    ],
)
def test_replies_meet_the_counts_or_say_what_fell_short(
    durability: Durability, replies: list[object], short: str | None
) -> None:
    found = durability.shortfall(replies)
    if short is None:
        assert found is None
    else:
        assert found is not None and found.startswith(short)


def test_waitaof_needs_redis_72_or_valkey_and_the_local_file() -> None:
    asked = Durability(aof_replicas=1)
    assert asked.refusal(REDIS_72, AOF_OFF) is None  # replicas' files only: the master's own is not asked
    assert asked.refusal(REDIS_8, AOF_OFF) is None
    assert asked.refusal(VALKEY, AOF_OFF) is None
    old = asked.refusal(REDIS_70, AOF_ON)
    assert old is not None and "version 7.0" in old and "Redis 7.2 or later, or Valkey" in old
    assert asked.refusal("# Server\r\n", AOF_ON) is not None  # no version: not assumed
    local = Durability(aof_local=1)
    assert local.refusal(VALKEY, AOF_ON) is None
    no_file = local.refusal(VALKEY, AOF_OFF)
    assert no_file is not None and "appendonly no" in no_file
    with pytest.raises(ConfigError, match="CONTINUITY_REDIS_WAIT_AOF_LOCAL"):
        local.check(REDIS_70, AOF_ON)
    Durability(replicas=1).check(REDIS_70, AOF_OFF)  # WAIT alone: any release


def test_the_settings() -> None:
    assert Durability.from_config(Config.from_env({})) == NONE
    config = Config.from_env(
        {
            "CONTINUITY_REDIS_WAIT_REPLICAS": "1",
            "CONTINUITY_REDIS_WAIT_AOF_LOCAL": "1",
            "CONTINUITY_REDIS_WAIT_AOF_REPLICAS": "2",
            "CONTINUITY_REDIS_WAIT_TIMEOUT_MS": "1500",
        }
    )
    assert Durability.from_config(config) == Durability(
        replicas=1, aof_local=1, aof_replicas=2, timeout_ms=1500
    )
    for name, value in (
        ("CONTINUITY_REDIS_WAIT_AOF_LOCAL", "2"),
        ("CONTINUITY_REDIS_WAIT_AOF_REPLICAS", "-1"),
    ):
        with pytest.raises(ConfigError, match=name):
            Config.from_env({name: value})


def test_noreplicas_is_an_outage_with_a_sanitized_message() -> None:
    error = _response_error("NOREPLICAS Not enough good replicas to write. script: 3f2a, on @user_script:40.")
    assert isinstance(error, NotEnoughReplicas) and isinstance(error, TRANSIENT_REDIS_ERRORS)
    assert "script" not in str(error)
