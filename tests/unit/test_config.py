"""Configuration from the environment: defaults, parsing, and errors that name the variable."""

from __future__ import annotations

import base64

import pytest

from shared.config import Config, ConfigError, parse_runner_keys

KEY = base64.b64encode(b"k" * 32).decode()


def test_defaults_suit_a_developer_machine() -> None:
    config = Config.from_env({})
    assert config.nats_url == "nats://127.0.0.1:4222" and config.redis_url.startswith("redis://")
    assert config.runner_keys == {} and config.stream_replicas == 1 and config.max_deliver == 5


def test_values_are_read() -> None:
    config = Config.from_env(
        {
            "NATS_URL": "nats://n:4222",
            "REDIS_URL": "redis://r:6379/2",
            "CONTINUITY_RUNNER_KEYS": f"k1={KEY}",
            "CONTINUITY_ARCHIVE_TIMEOUT_S": "2.5",
            "CONTINUITY_METRICS_PORT": "0",
            "CONTINUITY_STREAM_REPLICAS": "3",
            "CONTINUITY_LOG_LEVEL": "debug",
            "CONTINUITY_CONSUMER_IN_FLIGHT": "32",
        }
    )
    assert config.consumer_in_flight == 32
    assert (config.nats_url, config.redis_url, config.archive_timeout_s) == (
        "nats://n:4222",
        "redis://r:6379/2",
        2.5,
    )
    assert (config.metrics_port, config.stream_replicas, config.log_level) == (0, 3, "DEBUG")
    assert config.runner_keys == {"k1": b"k" * 32}


def test_several_live_keys_for_rotation() -> None:
    other = base64.b64encode(b"o" * 32).decode()
    assert set(parse_runner_keys(f"k1={KEY}, k2={other}")) == {"k1", "k2"}


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"CONTINUITY_METRICS_PORT": "http"}, "CONTINUITY_METRICS_PORT"),
        ({"CONTINUITY_METRICS_PORT": "70000"}, "CONTINUITY_METRICS_PORT"),
        ({"CONTINUITY_STREAM_REPLICAS": "0"}, "CONTINUITY_STREAM_REPLICAS"),
        ({"CONTINUITY_ARCHIVE_TIMEOUT_S": "-1"}, "CONTINUITY_ARCHIVE_TIMEOUT_S"),
        ({"CONTINUITY_ARCHIVE_TIMEOUT_S": "soon"}, "CONTINUITY_ARCHIVE_TIMEOUT_S"),
        ({"CONTINUITY_LOG_LEVEL": "loud"}, "CONTINUITY_LOG_LEVEL"),
        ({"CONTINUITY_CONSUMER_IN_FLIGHT": "0"}, "CONTINUITY_CONSUMER_IN_FLIGHT"),
        # More in hand than the consumer lets stay unacknowledged could never be fetched.
        ({"CONTINUITY_CONSUMER_IN_FLIGHT": "4097"}, "CONTINUITY_CONSUMER_IN_FLIGHT"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        Config.from_env(env)


@pytest.mark.parametrize("raw", ["k1", "=abc", "k1=not base64!", f"k1={KEY},k1={KEY}", "k1=c2hvcnQ="])
def test_bad_runner_keys_never_show_key_material(raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_runner_keys(raw)
    assert KEY not in str(err.value) and "c2hvcnQ" not in str(err.value)


def test_serve_refuses_a_bad_configuration_with_a_clear_message() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "CONTINUITY_RUNNER_KEYS": f"k1={KEY}", "CONTINUITY_STREAM_REPLICAS": "seven"}
    result = subprocess.run(
        [sys.executable, "-m", "continuity", "serve", "classifier"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "CONTINUITY_STREAM_REPLICAS" in result.stderr and KEY not in result.stderr


def test_a_consumer_holds_as_many_messages_as_configured() -> None:
    from typing import Any, cast

    from shared.bus.consumer import PullConsumer

    async def handler(msg: Any) -> None:
        return None

    config = Config.from_env({"CONTINUITY_CONSUMER_IN_FLIGHT": "40"})
    consumer = PullConsumer.from_config(
        cast(Any, None), config, stream="S", durable="d", filter_subject=None, handler=handler, service="t"
    )
    # Slots for 40 messages, fetched at least 10 at a time under load.
    assert (consumer._batch, consumer._min_fetch) == (40, 10)
