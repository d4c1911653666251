"""Who is acting, and whether a form really comes from the console: the rules, as pure functions.

- An operator is named by an authenticating proxy's header, trusted only from the proxy's
  configured addresses (the header from anywhere else refuses the request), or by a signed
  session cookie set by the development login. The actor recorded is that identity; no form
  field can name one.
- Every browser has a signed session cookie (HttpOnly, SameSite=Strict). A form must carry the
  anti-forgery token derived from that session, and come from the console's own origin.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import re
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

import msgspec

from services.console.config import ConsoleConfig
from shared.contracts.types import TOKEN_PATTERN

COOKIE = "continuity_console"
CSRF_FIELD = "csrf_token"
_TOKEN = re.compile(TOKEN_PATTERN)
_MAX_COOKIE = 1024


class Refused(Exception):
    """A request refused for who sent it; `reason` is a closed code (a metric label)."""

    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class _Payload(msgspec.Struct, array_like=True):
    sid: str
    actor: str | None
    exp: int


@dataclass(frozen=True)
class Session:
    sid: str
    actor: str | None
    """The identity signed in through the development login; None for a browser not signed in
    that way (a proxy names its operator on every request instead)."""
    exp: int


class Sessions:
    """Issues and reads signed session cookies, and derives their anti-forgery tokens."""

    def __init__(self, key: bytes, ttl_s: int) -> None:
        if len(key) < 32:
            raise ValueError("the session key needs at least 32 bytes")
        self._key = key
        self._ttl_s = ttl_s

    def _sign(self, purpose: bytes, data: bytes) -> str:
        return hmac.new(self._key, purpose + b"\n" + data, hashlib.sha256).hexdigest()

    def issue(self, actor: str | None, now: float) -> tuple[Session, str]:
        """A new session (a new id, so a login never keeps an id chosen before it) and its cookie."""
        session = Session(sid=secrets.token_urlsafe(18), actor=actor, exp=int(now) + self._ttl_s)
        body = base64.urlsafe_b64encode(msgspec.json.encode(_Payload(session.sid, actor, session.exp)))
        text = body.decode().rstrip("=")
        return session, f"{text}.{self._sign(b'session', text.encode())}"

    def read(self, cookie: str | None, now: float) -> Session | None:
        """The session of a cookie this console signed and that has not expired, else None."""
        if not cookie or len(cookie) > _MAX_COOKIE or "." not in cookie:
            return None
        text, _, signature = cookie.rpartition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(b"session", text.encode()).encode()):
            return None
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            payload = msgspec.json.decode(raw, type=_Payload)
        except (binascii.Error, ValueError, msgspec.MsgspecError):
            return None
        if payload.exp <= now:
            return None
        return Session(sid=payload.sid, actor=payload.actor, exp=payload.exp)

    def csrf_token(self, session: Session) -> str:
        return self._sign(b"csrf", session.sid.encode())

    def csrf_valid(self, session: Session | None, token: str | None) -> bool:
        if session is None or not token:
            return False
        return hmac.compare_digest(token.encode(), self.csrf_token(session).encode())


def proxy_identity(config: ConsoleConfig, peer: str | None, value: str | None) -> str | None:
    """The operator a trusted proxy names, None when there is no such header. The header from an
    address outside the trusted proxies, or a value that is not a TOKEN, refuses the request."""
    if not config.identity_header or value is None:
        return None
    if not peer_trusted(config, peer):
        raise Refused("untrusted_proxy")
    if not _TOKEN.match(value):
        raise Refused("invalid_identity")
    return value


def peer_trusted(config: ConsoleConfig, peer: str | None) -> bool:
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in config.trusted_proxies)


def expected_origin(config: ConsoleConfig, scheme: str, host: str) -> str:
    """The origin a form must come from: the configured one, else the request's own."""
    return config.origin or f"{scheme}://{host}"


def origin_allowed(expected: str, origin: str | None, referer: str | None) -> bool:
    """A form's Origin header (or, without one, its Referer's origin) equals `expected`; neither
    header at all is refused, since browsers send Origin with every form they post."""
    if origin and origin != "null":
        return origin == expected
    if referer:
        parts = urlsplit(referer)
        return f"{parts.scheme}://{parts.netloc}" == expected
    return False


def dev_token_valid(config: ConsoleConfig, typed: str) -> bool:
    if not config.dev_token:
        return False
    return hmac.compare_digest(typed.encode(), config.dev_token.encode())
