"""The console's identity and anti-forgery rules, as pure functions."""

from __future__ import annotations

import base64
import ipaddress

import pytest

from services.console.config import ConsoleConfig
from services.console.identity import (
    Refused,
    Sessions,
    dev_token_valid,
    expected_origin,
    origin_allowed,
    proxy_identity,
)
from services.console.runs_query import age_seconds
from services.console.web import safe_next
from shared.config import ConfigError

KEY = b"k" * 32
PROXY = ConsoleConfig(identity_header="X-User", trusted_proxies=(ipaddress.ip_network("10.1.0.0/16"),))


def test_a_session_cookie_round_trips_and_a_changed_byte_or_key_breaks_it() -> None:
    sessions = Sessions(KEY, ttl_s=60)
    session, cookie = sessions.issue("alice", now=1000)
    assert sessions.read(cookie, now=1001) == session and session.actor == "alice"
    body, _, sig = cookie.rpartition(".")
    assert sessions.read(f"{body}.{sig[:-1]}{'0' if sig[-1] != '0' else '1'}", now=1001) is None
    assert sessions.read(f"{body[:-1]}A.{sig}", now=1001) is None
    assert Sessions(b"x" * 32, ttl_s=60).read(cookie, now=1001) is None
    assert sessions.read(cookie, now=1060) is None  # expired
    assert sessions.read("", now=1) is None and sessions.read("x" * 5000, now=1) is None


def test_a_login_gets_a_new_session_id() -> None:
    sessions = Sessions(KEY, ttl_s=60)
    before, _ = sessions.issue(None, now=0)
    after, _ = sessions.issue("alice", now=0)
    assert before.sid != after.sid


def test_the_anti_forgery_token_belongs_to_one_session() -> None:
    sessions = Sessions(KEY, ttl_s=60)
    a, _ = sessions.issue(None, now=0)
    b, _ = sessions.issue(None, now=0)
    assert sessions.csrf_valid(a, sessions.csrf_token(a))
    assert not sessions.csrf_valid(b, sessions.csrf_token(a))
    assert not sessions.csrf_valid(a, "") and not sessions.csrf_valid(None, sessions.csrf_token(a))


def test_the_identity_header_is_trusted_only_from_the_proxy() -> None:
    assert proxy_identity(PROXY, "10.1.2.3", "alice") == "alice"
    assert proxy_identity(PROXY, "::ffff:10.1.2.3", "alice") == "alice"
    assert proxy_identity(PROXY, "10.2.0.1", None) is None  # no header: not signed in this way
    for peer in ("10.2.0.1", "127.0.0.1", None, "not-an-address"):
        with pytest.raises(Refused) as refused:
            proxy_identity(PROXY, peer, "alice")
        assert refused.value.reason == "untrusted_proxy"
    with pytest.raises(Refused) as refused:
        proxy_identity(PROXY, "10.1.2.3", "alice smith")
    assert refused.value.reason == "invalid_identity"
    assert proxy_identity(ConsoleConfig(dev_token="t" * 16), "10.1.2.3", "alice") is None


def test_forms_must_come_from_the_consoles_origin() -> None:
    expected = expected_origin(ConsoleConfig(), "http", "console.local:8080")
    assert expected == "http://console.local:8080"
    assert expected_origin(ConsoleConfig(origin="https://ops.example"), "http", "x") == "https://ops.example"
    assert origin_allowed(expected, "http://console.local:8080", None)
    assert not origin_allowed(expected, "http://evil.example", "http://console.local:8080/runs")
    assert origin_allowed(expected, None, "http://console.local:8080/runs/r1")
    assert not origin_allowed(expected, "null", None)
    assert not origin_allowed(expected, None, None)


def test_the_development_token_is_compared_whole() -> None:
    config = ConsoleConfig(dev_token="t" * 20)
    assert dev_token_valid(config, "t" * 20)
    assert not dev_token_valid(config, "t" * 19) and not dev_token_valid(ConsoleConfig(), "")


def test_configuration_needs_a_way_to_sign_in_and_names_the_bad_variable() -> None:
    with pytest.raises(ConfigError, match="no way to sign in"):
        ConsoleConfig.from_env({})
    with pytest.raises(ConfigError, match="CONTINUITY_CONSOLE_TRUSTED_PROXIES"):
        ConsoleConfig.from_env({"CONTINUITY_CONSOLE_IDENTITY_HEADER": "X-User"})
    with pytest.raises(ConfigError, match="CONTINUITY_CONSOLE_TRUSTED_PROXIES"):
        ConsoleConfig.from_env(
            {"CONTINUITY_CONSOLE_IDENTITY_HEADER": "X-User", "CONTINUITY_CONSOLE_TRUSTED_PROXIES": "nope"}
        )
    with pytest.raises(ConfigError, match="CONTINUITY_CONSOLE_DEV_TOKEN") as short:
        ConsoleConfig.from_env({"CONTINUITY_CONSOLE_DEV_TOKEN": "secret-short"})
    assert "secret-short" not in str(short.value)
    with pytest.raises(ConfigError, match="CONTINUITY_CONSOLE_SESSION_KEY"):
        ConsoleConfig.from_env(
            {"CONTINUITY_CONSOLE_DEV_TOKEN": "t" * 16, "CONTINUITY_CONSOLE_SESSION_KEY": "c2hvcnQ="}
        )
    with pytest.raises(ConfigError, match="CONTINUITY_CONSOLE_ORIGIN"):
        ConsoleConfig.from_env(
            {"CONTINUITY_CONSOLE_DEV_TOKEN": "t" * 16, "CONTINUITY_CONSOLE_ORIGIN": "https://x/path"}
        )
    config = ConsoleConfig.from_env(
        {
            "CONTINUITY_CONSOLE_IDENTITY_HEADER": "X-Forwarded-User",
            "CONTINUITY_CONSOLE_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7",
            "CONTINUITY_CONSOLE_SESSION_KEY": base64.b64encode(KEY).decode(),
            "CONTINUITY_CONSOLE_ORIGIN": "https://ops.example/",
        }
    )
    assert config.trusted_proxies == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("192.0.2.7/32"),
    )
    assert config.session_key == KEY and config.origin == "https://ops.example" and config.secure_cookies
    assert "session_key" not in repr(config) or KEY.decode() not in repr(config)


def test_after_login_only_a_path_of_the_console_is_followed() -> None:
    assert safe_next("/runs?status=operator") == "/runs?status=operator"
    for target in ("https://evil.example/", "//evil.example", "/\\evil.example", "", None):
        assert safe_next(target) == "/"


def test_ages_of_the_runs_filter() -> None:
    assert [age_seconds(t) for t in ("30s", "15m", "2h", "3d")] == [30, 900, 7200, 259200]
    assert age_seconds("15") is None and age_seconds("-1m") is None
