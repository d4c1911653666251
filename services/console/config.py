"""The console's own settings, from environment variables (the shared ones, NATS and metrics,
come from `shared.platform.config.Config`). A bad value stops the process at start with a message that
names the variable, never its value: the token and the session key are secrets."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from urllib.parse import quote, urlsplit

from shared.contract.types import TOKEN_PATTERN
from shared.platform.config import ConfigError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}\Z")
_TOKEN = re.compile(TOKEN_PATTERN)
MIN_KEY_BYTES = 32
SIDECAR: tuple[Network, ...] = (ipaddress.ip_network("127.0.0.1/32"),)
"""The proxy trusted when only the identity header is configured: one in the console's own pod
(or host), connecting over the loopback interface."""
TRACE_URL_VARIABLE = "CONTINUITY_CONSOLE_TRACE_URL"
RUN_ID_PLACEHOLDER = "{run_id}"
TRACE_URL_MAX_CHARS = 2048
"""The longest trace URL template accepted (2 KiB)."""
_URL_CHARACTERS = re.compile(r"^[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%{}]*\Z")
"""The characters of a URL (RFC 3986: unreserved, reserved and `%`) and the placeholder's braces:
no space, quote, `<`, `>`, backslash or non-ASCII letter, which a URL percent-encodes."""


def variables() -> frozenset[str]:
    """Every variable the console reads: each field of `ConsoleConfig` is read from
    CONTINUITY_CONSOLE_<FIELD>."""
    return frozenset(f"CONTINUITY_CONSOLE_{f.name.upper()}" for f in fields(ConsoleConfig))


@dataclass(frozen=True)
class ConsoleConfig:
    host: str = "127.0.0.1"
    """CONTINUITY_CONSOLE_HOST: the address the pages are served on (0.0.0.0 in a container)."""

    port: int = 8080
    """CONTINUITY_CONSOLE_PORT: their port; 0 picks a free one."""

    identity_header: str = ""
    """CONTINUITY_CONSOLE_IDENTITY_HEADER: the header in which an authenticating proxy names the
    signed-in operator (e.g. `X-Forwarded-User`); unset, no proxy is trusted. A request that
    carries it twice is refused, whoever sends it."""

    trusted_proxies: tuple[Network, ...] = ()
    """CONTINUITY_CONSOLE_TRUSTED_PROXIES: comma-separated single addresses of that proxy; a
    request from anywhere else that carries the header is refused. With the header set and this
    unset, `127.0.0.1`: the proxy runs beside the console, in its pod (a sidecar). A range is
    refused here: it goes in CONTINUITY_CONSOLE_TRUSTED_PROXY_RANGES, deliberately."""

    trusted_proxy_ranges: tuple[Network, ...] = ()
    """CONTINUITY_CONSOLE_TRUSTED_PROXY_RANGES: comma-separated CIDRs trusted like the proxy's
    addresses. Every address in them may name any operator, so use one only when something else
    (a NetworkPolicy, a firewall) lets nothing but the proxy reach the console from it."""

    forwarded_hops: int = 1
    """CONTINUITY_CONSOLE_FORWARDED_HOPS: on a request from a trusted proxy, the client is the
    address this many entries from the right of X-Forwarded-For (1: the one the proxy itself
    appended; 2 when an ingress that appends its client's address stands before the proxy);
    0 never reads the header. A request from anyone else is its connection's peer."""

    dev_token: str = field(default="", repr=False)
    """CONTINUITY_CONSOLE_DEV_TOKEN: for development, a token typed into the login form, which
    then sets a signed session cookie; unset, the login form is off."""

    dev_token_file: str = ""
    """CONTINUITY_CONSOLE_DEV_TOKEN_FILE: a file holding that token (its first line), so that
    it is in no environment variable; not both."""

    dev_actor: str = "developer"
    """CONTINUITY_CONSOLE_DEV_ACTOR: the identity recorded for whoever signs in with that token."""

    session_key: bytes = field(default=b"", repr=False)
    """CONTINUITY_CONSOLE_SESSION_KEY: base64 of at least 32 bytes that sign session cookies and
    anti-forgery tokens; every replica needs the same one. Unset, a random key per process
    (sessions end when it restarts)."""

    origin: str = ""
    """CONTINUITY_CONSOLE_ORIGIN: the console's public origin (`https://console.example.com`);
    a form whose Origin differs is refused. Unset, the origin of the request's own Host."""

    session_ttl_s: int = 8 * 3600
    """CONTINUITY_CONSOLE_SESSION_TTL_S: how long a session cookie is valid."""

    request_timeout_s: float = 5.0
    """CONTINUITY_CONSOLE_REQUEST_TIMEOUT_S: how long a page waits for a service's answer."""

    login_failures: int = 5
    """CONTINUITY_CONSOLE_LOGIN_FAILURES: wrong development tokens one client (an IPv4 address,
    an IPv6 /64) may send within the window; its next attempt is refused unchecked (429) until
    the oldest leaves the window."""

    login_failures_total: int = 50
    """CONTINUITY_CONSOLE_LOGIN_FAILURES_TOTAL: wrong tokens of every client together within the
    window past which a wrong token is answered 429 instead of 401. It never refuses the right
    token: one client's failures cannot lock another out."""

    login_window_s: int = 60
    """CONTINUITY_CONSOLE_LOGIN_WINDOW_S: the window of those counts, in seconds."""

    trace_url: str = ""
    """CONTINUITY_CONSOLE_TRACE_URL: a URL template of a run's traces; the run page then links
    to it ("Traces", opened in a new tab) with `{run_id}` replaced by the run id, percent-encoded
    (every character but letters, digits and `_.-~`). An http:// or https:// URL with a host, at
    most 2,048 characters, of those a URL allows (percent-encode spaces, quotes, `<`, `>`,
    non-ASCII letters), with `{run_id}` outside the host and no other `{...}` (write other
    braces as `%7B` and `%7D`); a bad value stops the start. Unset, the run page has no such
    link. For Jaeger's search by the span attribute `continuity.run_id`
    (docs/operations/tracing.md):
    `http://localhost:16686/search?service=continuity-classifier&tags=%7B%22continuity.run_id%22%3A%22{run_id}%22%7D`"""

    @property
    def secure_cookies(self) -> bool:
        """Cookies are `Secure` whenever the public origin is HTTPS."""
        return self.origin.startswith("https://")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ConsoleConfig:
        env = os.environ if env is None else env
        d = cls()
        header, proxies, ranges = _proxy(env)
        dev_token, dev_token_file = _dev_token(env)
        if not header and not dev_token:
            raise ConfigError(
                "no way to sign in: set CONTINUITY_CONSOLE_IDENTITY_HEADER and "
                "CONTINUITY_CONSOLE_TRUSTED_PROXIES, or CONTINUITY_CONSOLE_DEV_TOKEN"
            )
        actor = env.get("CONTINUITY_CONSOLE_DEV_ACTOR", d.dev_actor)
        if not _TOKEN.match(actor):
            raise ConfigError("CONTINUITY_CONSOLE_DEV_ACTOR: must match the contract's TOKEN pattern")
        origin = _origin(env)
        trace_url = parse_trace_url(env.get(TRACE_URL_VARIABLE, ""))
        return cls(
            host=env.get("CONTINUITY_CONSOLE_HOST", d.host),
            port=_int(env, "CONTINUITY_CONSOLE_PORT", d.port, 0, 65535),
            identity_header=header,
            trusted_proxies=proxies,
            trusted_proxy_ranges=ranges,
            forwarded_hops=_int(env, "CONTINUITY_CONSOLE_FORWARDED_HOPS", d.forwarded_hops, 0, 10),
            dev_token=dev_token,
            dev_token_file=dev_token_file,
            dev_actor=actor,
            session_key=_key(env.get("CONTINUITY_CONSOLE_SESSION_KEY", "")),
            origin=origin,
            session_ttl_s=_int(env, "CONTINUITY_CONSOLE_SESSION_TTL_S", d.session_ttl_s, 60, 30 * 86400),
            request_timeout_s=float(_int(env, "CONTINUITY_CONSOLE_REQUEST_TIMEOUT_S", 5, 1, 60)),
            login_failures=_int(env, "CONTINUITY_CONSOLE_LOGIN_FAILURES", d.login_failures, 1, 1000),
            login_failures_total=_int(
                env, "CONTINUITY_CONSOLE_LOGIN_FAILURES_TOTAL", d.login_failures_total, 1, 100_000
            ),
            login_window_s=_int(env, "CONTINUITY_CONSOLE_LOGIN_WINDOW_S", d.login_window_s, 1, 86400),
            trace_url=trace_url,
        )

    def with_key(self) -> ConsoleConfig:
        """This configuration with a session key: the configured one, or a random one."""
        if self.session_key:
            return self
        from dataclasses import replace

        return replace(self, session_key=secrets.token_bytes(MIN_KEY_BYTES))


def parse_trace_url(raw: str) -> str:
    """The trace URL template `raw` (surrounding whitespace dropped; empty: no link), or a
    `ConfigError` that says what is wrong with it without repeating it."""
    name = TRACE_URL_VARIABLE
    template = raw.strip()
    if not template:
        return ""
    if len(template) > TRACE_URL_MAX_CHARS:
        raise ConfigError(f"{name}: at most {TRACE_URL_MAX_CHARS} characters")
    if not _URL_CHARACTERS.match(template):
        raise ConfigError(f"{name}: only the characters of a URL (percent-encode the others)")
    if RUN_ID_PLACEHOLDER not in template:
        raise ConfigError(f"{name}: must contain {RUN_ID_PLACEHOLDER}, where the run id goes")
    rest = template.replace(RUN_ID_PLACEHOLDER, "")
    if "{" in rest or "}" in rest:
        raise ConfigError(
            f"{name}: {RUN_ID_PLACEHOLDER} is the only placeholder (write other braces as %7B and %7D)"
        )
    try:
        parts = urlsplit(template)
    except ValueError:
        raise ConfigError(f"{name}: not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{name}: an http:// or https:// URL with a host")
    if "{" in parts.netloc:
        raise ConfigError(f"{name}: {RUN_ID_PLACEHOLDER} may not be part of the host")
    return template


def trace_link(template: str, run_id: str) -> str:
    """`template` (a valid `trace_url`) with `{run_id}` replaced by `run_id` percent-encoded,
    every character but letters, digits and `_.-~`: a run id cannot end the query or the
    path, add a parameter, or name another placeholder."""
    return template.replace(RUN_ID_PLACEHOLDER, quote(run_id, safe=""))


def parse_networks(raw: str, name: str = "CONTINUITY_CONSOLE_TRUSTED_PROXIES") -> tuple[Network, ...]:
    networks = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ConfigError(f"{name}: not an address or CIDR") from None
    return tuple(networks)


def _proxy(env: Mapping[str, str]) -> tuple[str, tuple[Network, ...], tuple[Network, ...]]:
    """The identity header and the proxies trusted to send it: its addresses and ranges."""
    header = env.get("CONTINUITY_CONSOLE_IDENTITY_HEADER", "").strip()
    if header and not _HEADER_NAME.match(header):
        raise ConfigError("CONTINUITY_CONSOLE_IDENTITY_HEADER: not a header name")
    proxies = parse_networks(env.get("CONTINUITY_CONSOLE_TRUSTED_PROXIES", ""))
    if any(n.num_addresses > 1 for n in proxies):
        raise ConfigError(
            "CONTINUITY_CONSOLE_TRUSTED_PROXIES: single addresses only "
            "(a range goes in CONTINUITY_CONSOLE_TRUSTED_PROXY_RANGES)"
        )
    ranges = parse_networks(
        env.get("CONTINUITY_CONSOLE_TRUSTED_PROXY_RANGES", ""), "CONTINUITY_CONSOLE_TRUSTED_PROXY_RANGES"
    )
    if header and not proxies and not ranges:
        proxies = SIDECAR
    return header, proxies, ranges


def _dev_token(env: Mapping[str, str]) -> tuple[str, str]:
    """The development login's token, and the file it was read from (empty: the variable's)."""
    dev_token = env.get("CONTINUITY_CONSOLE_DEV_TOKEN", "")
    dev_token_file = env.get("CONTINUITY_CONSOLE_DEV_TOKEN_FILE", "").strip()
    if dev_token_file:
        if dev_token:
            raise ConfigError(
                "CONTINUITY_CONSOLE_DEV_TOKEN_FILE: not with CONTINUITY_CONSOLE_DEV_TOKEN (one token)"
            )
        dev_token = _read_token(dev_token_file)
    if dev_token and len(dev_token) < 16:
        raise ConfigError("CONTINUITY_CONSOLE_DEV_TOKEN: at least 16 characters")
    return dev_token, dev_token_file


def _origin(env: Mapping[str, str]) -> str:
    origin = env.get("CONTINUITY_CONSOLE_ORIGIN", "").rstrip("/")
    if origin:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path:
            raise ConfigError("CONTINUITY_CONSOLE_ORIGIN: scheme://host[:port], nothing more")
    return origin


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip()
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"CONTINUITY_CONSOLE_DEV_TOKEN_FILE: {path!r} is not a readable file") from None


def _key(raw: str) -> bytes:
    if not raw:
        return b""
    try:
        key = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("CONTINUITY_CONSOLE_SESSION_KEY: not base64") from None
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"CONTINUITY_CONSOLE_SESSION_KEY: at least {MIN_KEY_BYTES} bytes")
    return key


def _int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}: not a whole number") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}: must be between {lo} and {hi}")
    return value
