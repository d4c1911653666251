"""Configuration from the environment: defaults, parsing, and errors that name the variable."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from services.registry import known_variables, unknown_variables
from shared.platform.config import (
    NATS_TLS_PREFIX,
    REDIS_TLS_PREFIX,
    Config,
    ConfigError,
    parse_runner_keys,
    unknown_variable_message,
)

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

    from shared.platform.bus.consumer import PullConsumer

    async def handler(msg: Any) -> None:
        return None

    config = Config.from_env({"CONTINUITY_CONSUMER_IN_FLIGHT": "40"})
    consumer = PullConsumer.from_config(
        cast(Any, None), config, stream="S", durable="d", filter_subject=None, handler=handler, service="t"
    )
    # Slots for 40 messages, fetched at least 10 at a time under load.
    assert (consumer._batch, consumer._min_fetch) == (40, 10)


def test_a_mistyped_variable_is_named_with_the_closest_known_one() -> None:
    env = {"CONTINUITY_MAX_DELIVERS": "7", "CONTINUITY_LOGLEVEL": "DEBUG", "CONTINUITY_WHATEVER": "1"}
    assert unknown_variables(env) == [
        ("CONTINUITY_LOGLEVEL", "CONTINUITY_LOG_LEVEL"),
        ("CONTINUITY_MAX_DELIVERS", "CONTINUITY_MAX_DELIVER"),
        ("CONTINUITY_WHATEVER", None),
    ]
    line = unknown_variable_message("CONTINUITY_MAX_DELIVERS", "CONTINUITY_MAX_DELIVER")
    assert line == (
        "CONTINUITY_MAX_DELIVERS is not a Continuity variable and is ignored; "
        "did you mean CONTINUITY_MAX_DELIVER?"
    )
    # Not a configuration error: the value is still not read, and nothing stops.
    assert Config.from_env(env).max_deliver == 5


def test_every_known_variable_passes() -> None:
    known = known_variables()
    assert {"CONTINUITY_MAX_DELIVER", "CONTINUITY_NATS_TLS_CA", "CONTINUITY_CONSOLE_DEV_TOKEN"} <= known
    assert "CONTINUITY_NATS_SYSTEM_PASSWORD" in known  # the NATS server's, exported with compose's
    assert unknown_variables(dict.fromkeys(known, "x")) == []
    assert unknown_variables({"NATS_URL": "nats://n:4222", "HOME": "/"}) == []  # only CONTINUITY_*


class Reads(dict[str, str]):
    """An environment that notes the names asked of it."""

    def __init__(self, **values: str) -> None:
        super().__init__(values)
        self.asked: set[str] = set()

    def get(self, name: str, default: Any = None) -> Any:
        self.asked.add(name)
        return super().get(name, default)

    def __getitem__(self, name: str) -> str:
        self.asked.add(name)
        return super().__getitem__(name)


def test_the_console_reads_only_known_variables() -> None:
    from services.console.config import ConsoleConfig

    env = Reads(CONTINUITY_CONSOLE_DEV_TOKEN="t" * 16)  # so that every setting is read
    ConsoleConfig.from_env(env)
    assert {n for n in env.asked if n.startswith("CONTINUITY_")} <= known_variables()


STREAMS = {
    "CONTINUITY_EVENTS",
    "CONTINUITY_DECISIONS",
    "CONTINUITY_WORK",
    "CONTINUITY_DEAD",
    "CONTINUITY_HISTORY",
}
NAME = re.compile(r"\bCONTINUITY_[A-Z0-9_]*[A-Z0-9]\b")
ROOT = Path(__file__).resolve().parents[2]
SCANNED = {".py", ".ts", ".yaml", ".yml", ".conf", ".md", ".toml", ".json", ".env", ".tpl"}


def _named_in_the_tree() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("node_modules", "__pycache__")]
        for file in files:
            path = Path(folder, file)
            if path == Path(__file__).resolve():
                continue  # its mistyped names are on purpose
            if path.suffix not in SCANNED and file not in ("Makefile", "Dockerfile"):
                continue
            with contextlib.suppress(OSError, UnicodeDecodeError):
                for name in NAME.findall(path.read_text(encoding="utf-8")):
                    found.setdefault(name, path.relative_to(ROOT))
    return found


def test_every_variable_the_tree_names_is_known() -> None:
    """Code, manifests and docs name no CONTINUITY_* variable the check would call unknown
    (stream names and the TLS prefixes aside)."""
    named = _named_in_the_tree()
    assert {"CONTINUITY_RUNNER_KEYS", "CONTINUITY_CONSOLE_PORT"} <= set(named)  # the scan sees them
    prefixes = {NATS_TLS_PREFIX, REDIS_TLS_PREFIX}
    unknown = {n: str(p) for n, p in named.items() if n not in known_variables() | STREAMS | prefixes}
    assert unknown == {}


def test_commands_and_services_name_an_unknown_variable_without_stopping(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from continuity.cli import main as cli

    monkeypatch.setenv("CONTINUITY_MAX_DELIVERS", "7")
    assert cli.main(["completion", "bash"]) == 0
    err = capsys.readouterr().err
    assert err == (
        "continuity: warning: CONTINUITY_MAX_DELIVERS is not a Continuity variable and is "
        "ignored; did you mean CONTINUITY_MAX_DELIVER?\n"
    )
    # A service says it in its JSON log; here its configuration then stops it (exit 2).
    env = {**os.environ, "CONTINUITY_MAX_DELIVERS": "7", "CONTINUITY_STREAM_REPLICAS": "seven"}
    result = subprocess.run(
        [sys.executable, "-m", "continuity", "serve", "classifier"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert [(e["level"], e["event"], e["variable"], e["closest"]) for e in logged] == [
        ("warning", "unknown_variable", "CONTINUITY_MAX_DELIVERS", "CONTINUITY_MAX_DELIVER")
    ]
