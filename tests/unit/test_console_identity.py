"""The console's identity and anti-forgery rules, as pure functions."""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import replace
from urllib.parse import unquote, urljoin, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.console.config import ConsoleConfig
from services.console.identity import (
    Refused,
    Sessions,
    client_address,
    client_bucket,
    dev_token_valid,
    expected_origin,
    origin_allowed,
    proxy_identity,
    safe_next,
)
from services.console.runs_query import age_seconds
from shared.platform.config import ConfigError

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
    assert proxy_identity(PROXY, "10.1.2.3", ["alice"]) == "alice"
    assert proxy_identity(PROXY, "::ffff:10.1.2.3", ["alice"]) == "alice"
    assert proxy_identity(PROXY, "10.2.0.1", []) is None  # no header: not signed in this way
    for peer in ("10.2.0.1", "127.0.0.1", None, "not-an-address"):
        with pytest.raises(Refused) as refused:
            proxy_identity(PROXY, peer, ["alice"])
        assert refused.value.reason == "untrusted_proxy"
    with pytest.raises(Refused) as refused:
        proxy_identity(PROXY, "10.1.2.3", ["alice smith"])
    assert refused.value.reason == "invalid_identity"
    assert proxy_identity(ConsoleConfig(dev_token="t" * 16), "10.1.2.3", ["alice"]) is None


def test_the_identity_header_sent_twice_is_refused_even_from_the_proxy() -> None:
    """Which of two values a proxy replaced cannot be known: neither is taken."""
    for values in (["alice", "admin"], ["admin", "alice"], ["alice", "alice"]):
        with pytest.raises(Refused) as refused:
            proxy_identity(PROXY, "10.1.2.3", values)
        assert (refused.value.reason, refused.value.status) == ("duplicated_header", 400)


SIDECAR_PROXY = ConsoleConfig.from_env({"CONTINUITY_CONSOLE_IDENTITY_HEADER": "X-User"})


def test_the_client_behind_a_trusted_proxy_is_the_address_it_forwarded() -> None:
    config = SIDECAR_PROXY
    assert client_address(config, "127.0.0.1", ["198.51.100.7"]) == "198.51.100.7"
    # The proxy appends its own client to what it was sent: the rightmost entry is the one.
    assert client_address(config, "127.0.0.1", ["203.0.113.9, 198.51.100.7"]) == "198.51.100.7"
    assert client_address(config, "127.0.0.1", []) == "127.0.0.1"
    # From anyone else the header is whatever the sender claims: its own address counts.
    assert client_address(config, "192.0.2.44", ["198.51.100.7"]) == "192.0.2.44"
    behind_ingress = replace(config, forwarded_hops=2)
    assert client_address(behind_ingress, "127.0.0.1", ["6.6.6.6, 198.51.100.7, 10.0.0.3"]) == "198.51.100.7"
    assert client_address(behind_ingress, "127.0.0.1", ["10.0.0.3"]) == "10.0.0.3"
    assert client_address(replace(config, forwarded_hops=0), "127.0.0.1", ["198.51.100.7"]) == "127.0.0.1"
    for sent, reason in (
        (["198.51.100.7", "198.51.100.8"], "duplicated_header"),
        (["not-an-address"], "invalid_forwarded_for"),
    ):
        with pytest.raises(Refused) as refused:
            client_address(config, "127.0.0.1", sent)
        assert (refused.value.reason, refused.value.status) == (reason, 400)
    with pytest.raises(Refused, match="duplicated_header"):
        client_address(config, "192.0.2.44", ["1.1.1.1", "2.2.2.2"])


def test_an_ipv6_client_is_throttled_by_its_64() -> None:
    assert (
        client_bucket("2001:db8:1:2:aaaa::1") == client_bucket("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    )
    assert client_bucket("2001:db8:1:3::1") != client_bucket("2001:db8:1:2::1")
    assert client_bucket("198.51.100.7") == "198.51.100.7"
    assert client_bucket("::ffff:198.51.100.7") == "198.51.100.7"


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
    # The header alone trusts a proxy beside the console (its pod's sidecar) and nothing else.
    sidecar = ConsoleConfig.from_env({"CONTINUITY_CONSOLE_IDENTITY_HEADER": "X-User"})
    assert sidecar.trusted_proxies == (ipaddress.ip_network("127.0.0.1/32"),)
    assert sidecar.trusted_proxy_ranges == () and sidecar.forwarded_hops == 1
    with pytest.raises(ConfigError, match="CONTINUITY_CONSOLE_TRUSTED_PROXIES"):
        ConsoleConfig.from_env(
            {"CONTINUITY_CONSOLE_IDENTITY_HEADER": "X-User", "CONTINUITY_CONSOLE_TRUSTED_PROXIES": "nope"}
        )
    # A range is no proxy's address: it must be asked for by its own name.
    for raw in ("10.244.0.0/16", "192.0.2.7, 10.0.0.0/8", "2001:db8::/64"):
        with pytest.raises(
            ConfigError, match=r"single addresses only.*CONTINUITY_CONSOLE_TRUSTED_PROXY_RANGES"
        ):
            ConsoleConfig.from_env(
                {"CONTINUITY_CONSOLE_IDENTITY_HEADER": "X-User", "CONTINUITY_CONSOLE_TRUSTED_PROXIES": raw}
            )
    with pytest.raises(ConfigError, match="CONTINUITY_CONSOLE_TRUSTED_PROXY_RANGES"):
        ConsoleConfig.from_env(
            {"CONTINUITY_CONSOLE_IDENTITY_HEADER": "X-User", "CONTINUITY_CONSOLE_TRUSTED_PROXY_RANGES": "x"}
        )
    with pytest.raises(ConfigError, match="CONTINUITY_CONSOLE_FORWARDED_HOPS"):
        ConsoleConfig.from_env(
            {"CONTINUITY_CONSOLE_DEV_TOKEN": "t" * 16, "CONTINUITY_CONSOLE_FORWARDED_HOPS": "-1"}
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
            "CONTINUITY_CONSOLE_TRUSTED_PROXIES": "192.0.2.7, 2001:db8::7/128",
            "CONTINUITY_CONSOLE_TRUSTED_PROXY_RANGES": "10.0.0.0/8",
            "CONTINUITY_CONSOLE_FORWARDED_HOPS": "2",
            "CONTINUITY_CONSOLE_SESSION_KEY": base64.b64encode(KEY).decode(),
            "CONTINUITY_CONSOLE_ORIGIN": "https://ops.example/",
        }
    )
    assert config.trusted_proxies == (
        ipaddress.ip_network("192.0.2.7/32"),
        ipaddress.ip_network("2001:db8::7/128"),
    )
    assert config.trusted_proxy_ranges == (ipaddress.ip_network("10.0.0.0/8"),)
    assert config.forwarded_hops == 2
    assert proxy_identity(config, "10.9.8.7", ["alice"]) == "alice"  # the range, as asked
    assert config.session_key == KEY and config.origin == "https://ops.example" and config.secure_cookies
    assert "session_key" not in repr(config) or KEY.decode() not in repr(config)


def browser_target(location: str) -> tuple[str, str]:
    """Where a browser goes for a `Location` answered by http://console.example/login: the URL
    standard's clean-up (C0 controls and spaces trimmed, tabs and newlines removed, a backslash
    read as a slash in an http URL), then the reference resolved. Returns (origin, path)."""
    cleaned = location.strip("".join(map(chr, range(0x21))))
    cleaned = "".join(ch for ch in cleaned if ch not in "\t\n\r").replace("\\", "/")
    target = urlsplit(urljoin("http://console.example/login", cleaned))
    return f"{target.scheme}://{target.netloc}", target.path


def decodings(text: str) -> list[str]:
    """`text` and each percent-decoding of it until nothing changes."""
    found = [text]
    while len(found) < 10 and unquote(found[-1]) != found[-1]:
        found.append(unquote(found[-1]))
    return found


HOSTILE_NEXT = (
    "https://evil.example/",
    "//evil.example",
    "/\\evil.example",
    "\\/evil.example",
    "/\t/evil.example",  # a browser drops the tab: //evil.example
    "/.//.",  # a last dot-segment keeps its slash: //
    "/.//%2e",
    "/%09/evil.example",
    "/%2509/evil.example",
    "/\r\n/evil.example",
    "/%0d%0a/evil.example",
    "/%0D/evil.example",
    "/\n/evil.example",
    "/ /evil.example",
    "/%20/evil.example",
    " //evil.example",
    "\t//evil.example",
    "/\x00/evil.example",
    "/%00/evil.example",
    "/\x0b/evil.example",
    "/\x7f/evil.example",
    "/\u3000/evil.example",
    "/%E3%80%80/evil.example",
    "/\u2028/evil.example",
    "/\u200b/evil.example",
    "/%5Cevil.example",
    "/%5cevil.example",
    "/%2F%2Fevil.example",
    "/%2f/evil.example",
    "/%252F%252Fevil.example",
    "/./%2Fevil.example",
    "/a/..//evil.example",
    "/a/%2e%2e//evil.example",
    "/.//evil.example",
    "/%2E//evil.example",
    "http:evil.example",
    "https:/evil.example",
    "javascript:alert(1)",
    "data:text/html,x",
    "evil.example",
    "/\u00fcber",  # raw non-ASCII: the console's own links are percent-encoded
    "/runs%2525252541",  # still changing after 4 decodings
    "",
    None,
    "/" + "a" * 5000,
)


@pytest.mark.parametrize("target", HOSTILE_NEXT)
def test_after_login_a_hostile_next_falls_back_to_the_overview(target: str | None) -> None:
    assert safe_next(target) == "/"


def test_after_login_a_path_of_the_console_is_followed() -> None:
    for target in (
        "/",
        "/runs?status=operator",
        "/run?id=..",
        "/run?id=.",
        "/runs?tenant=a%3Ab&limit=5",
        "/dead",
        "/runs%25252541",  # decoded 4 times
        "/run?id=%E3%81%82",  # a printable character, percent-encoded
    ):
        assert safe_next(target) == target


_PIECES = st.sampled_from(
    [
        "/",
        "//",
        "\\",
        "%2f",
        "%2F",
        "%5c",
        "%5C",
        "%25",
        "%09",
        "%0a",
        "%0D",
        "%00",
        "%20",
        "%2e",
        ".",
        "..",
        "\t",
        "\n",
        "\r",
        " ",
        "\x0c",
        "\x00",
        "\u3000",
        "\u2028",
        "\ufeff",
        "http:",
        "https:",
        "javascript:",
        "evil.example",
        "runs",
        "?",
        "#",
        "@",
        "=",
        "a",
        ":",
    ]
)


@settings(max_examples=2000)
@given(st.lists(_PIECES, max_size=8).map("".join))
def test_a_next_either_falls_back_or_stays_on_the_console(target: str) -> None:
    followed = safe_next(target)
    if followed == "/":
        return
    assert followed == target  # a path is kept exactly, or not at all
    origin, path = browser_target(followed)
    assert origin == "http://console.example" and not path.startswith("//")
    for text in decodings(followed):
        assert text.startswith("/") and not text.startswith("//")
        assert not any(ch == "\\" or ch.isspace() or not ch.isprintable() for ch in text)


@given(
    st.from_regex(
        r"/[A-Za-z0-9_-]{1,12}(/[A-Za-z0-9_-]{1,12}){0,3}(\?[a-z_]{1,8}=[A-Za-z0-9.:_-]{0,12})?",
        fullmatch=True,
    )
)
def test_every_plain_path_of_the_console_is_followed(target: str) -> None:
    assert safe_next(target) == target


def test_ages_of_the_runs_filter() -> None:
    assert [age_seconds(t) for t in ("30s", "15m", "2h", "3d")] == [30, 900, 7200, 259200]
    assert age_seconds("15") is None and age_seconds("-1m") is None
