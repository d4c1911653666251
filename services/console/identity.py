"""Who is acting, and whether a form really comes from the console: the rules, as pure functions.

- An operator is named by an authenticating proxy's header, trusted only from the proxy's
  configured addresses (the header from anywhere else refuses the request, and so does the
  header sent twice), or by a signed session cookie set by the development login. The actor
  recorded is that identity; no form field can name one.
- The client is the connection's peer, or, on a request from a trusted proxy, the address the
  proxies recorded in X-Forwarded-For (`client_address`).
- Every browser has a signed session cookie (HttpOnly, SameSite=Strict). A form must carry the
  anti-forgery token derived from that session, and come from the console's own origin.
- Wrong development tokens are counted per client (`LoginThrottle`): past the limit, that
  client's attempts are refused unchecked until the window has moved on. Past the count of all
  clients together a wrong token is answered 429, but the right one is never refused for
  others' failures.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import math
import re
import secrets
from collections import OrderedDict, deque
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import msgspec

from services.console.config import ConsoleConfig
from shared.contract.types import TOKEN_PATTERN

COOKIE = "continuity_console"
CSRF_FIELD = "csrf_token"
_TOKEN = re.compile(TOKEN_PATTERN)
_MAX_COOKIE = 1024
_MAX_NEXT = 2048
_NEXT_DECODINGS = 4
"""A `next` that still changes when decoded after this many decodings is refused: no link of
the console is encoded more than twice."""
_DOT_SEGMENTS = {".": 1, "%2e": 1, "..": 2, ".%2e": 2, "%2e.": 2, "%2e%2e": 2}
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


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


def proxy_identity(config: ConsoleConfig, peer: str | None, values: list[str]) -> str | None:
    """The operator a trusted proxy names, None when there is no such header. `values` are every
    value the request carries under the identity header: more than one refuses the request
    (which one a proxy replaced is unknowable), and so do the header from an address outside the
    trusted proxies and a value that is not a TOKEN."""
    if not config.identity_header or not values:
        return None
    if len(values) > 1:
        raise Refused("duplicated_header", 400)
    if not peer_trusted(config, peer):
        raise Refused("untrusted_proxy")
    (value,) = values
    if not _TOKEN.match(value):
        raise Refused("invalid_identity")
    return value


def _address(text: str | None) -> Address | None:
    if not text:
        return None
    try:
        address = ipaddress.ip_address(text.strip().split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def peer_trusted(config: ConsoleConfig, peer: str | None) -> bool:
    address = _address(peer)
    if address is None:
        return False
    networks = (*config.trusted_proxies, *config.trusted_proxy_ranges)
    return any(address in network for network in networks)


def client_address(config: ConsoleConfig, peer: str | None, forwarded: list[str]) -> str:
    """Who a request comes from, for the sign-in throttle: the connection's peer, or, when the
    peer is a trusted proxy, the address `forwarded_hops` entries from the right of its
    X-Forwarded-For (the leftmost, when there are fewer: each was written by a proxy). A header
    sent twice, or an entry there that is not an address, refuses the request; a peer that is
    no trusted proxy is itself the client, whatever it claims."""
    if len(forwarded) > 1:
        raise Refused("duplicated_header", 400)
    if not forwarded or config.forwarded_hops == 0 or not peer_trusted(config, peer):
        return peer or "-"
    entries = [entry.strip() for entry in forwarded[0].split(",")]
    chosen = entries[-config.forwarded_hops] if len(entries) >= config.forwarded_hops else entries[0]
    address = _address(chosen)
    if address is None:
        raise Refused("invalid_forwarded_for", 400)
    return str(address)


def client_bucket(address: str) -> str:
    """The throttle's key of a client address: an IPv4 address, or the /64 of an IPv6 address
    (one host commonly holds a whole /64, and could otherwise start afresh at each address)."""
    parsed = _address(address)
    if isinstance(parsed, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed) if parsed is not None else address


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


class LoginThrottle:
    """Failed sign-ins within a sliding window, per client (`client_bucket`) and in all.

    `wait_s` holds back a client after its own failures only; `storm_s` says how long the
    failures of every client together stay past their limit, which slows wrong tokens and never
    refuses the right one (pages/signin.py): nobody is locked out by somebody else's guesses.

    Memory stays bounded: each address keeps at most `per_address` times and the total at most
    `total`; at most `max_addresses` addresses are kept, the one whose last failure is oldest
    forgotten first (the total still counts its failures)."""

    def __init__(self, per_address: int, total: int, window_s: float, max_addresses: int = 4096) -> None:
        self._per_address = per_address
        self._window_s = window_s
        self._max_addresses = max_addresses
        self._by_address: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque(maxlen=total)

    @property
    def addresses(self) -> int:
        return len(self._by_address)

    def wait_s(self, address: str, now: float) -> int:
        """Whole seconds before `address` may try again after its own failures; 0 when it may
        now. Other addresses' failures never hold it back."""
        self._forget(now)
        failures = self._by_address.get(address)
        if failures is not None and len(failures) >= self._per_address:
            return max(math.ceil(failures[0] + self._window_s - now), 0)
        return 0

    def storm_s(self, now: float) -> int:
        """Whole seconds until the failures of every address together are below their limit
        again; 0 when they are."""
        self._forget(now)
        if self._all.maxlen is not None and len(self._all) >= self._all.maxlen:
            return max(math.ceil(self._all[0] + self._window_s - now), 0)
        return 0

    def failed(self, address: str, now: float) -> None:
        self._forget(now)
        failures = self._by_address.pop(address, None) or deque(maxlen=self._per_address)
        failures.append(now)
        self._by_address[address] = failures  # last: the most recent failure
        self._all.append(now)
        while len(self._by_address) > self._max_addresses:
            self._by_address.popitem(last=False)

    def _forget(self, now: float) -> None:
        """Drop the failures that left the window, and the addresses left with none."""
        edge = now - self._window_s
        while self._all and self._all[0] <= edge:
            self._all.popleft()
        # Oldest last failure first: past the first address with a recent one, none is stale.
        while self._by_address:
            address, failures = next(iter(self._by_address.items()))
            if failures[-1] > edge:
                break
            del self._by_address[address]
        # Within an address, a failure that left the window is never counted: its deque holds
        # at most `per_address` times, so an old first one means fewer recent than the limit.


def dev_token_valid(config: ConsoleConfig, typed: str) -> bool:
    if not config.dev_token:
        return False
    return hmac.compare_digest(typed.encode(), config.dev_token.encode())


def safe_next(target: str | None) -> str:
    """Where to go after signing in: `target` when it is a path of this console, else "/".

    Browsers drop tabs and newlines from a `Location`, trim spaces and controls, and read a
    backslash as a slash, so `/<tab>/evil.example` would reach `//evil.example`, another site.
    A target is kept only when it is printable ASCII and, as sent and after each percent-
    decoding, has no whitespace, control or backslash, names no scheme or host, and does not
    start with `//`, also once its dot-segments are resolved."""
    if not target or len(target) > _MAX_NEXT or not target.isascii():
        return "/"
    text = target
    for _ in range(_NEXT_DECODINGS + 1):  # the text as sent, then each decoding of it
        if not _local_path(text):
            return "/"
        decoded = unquote(text)
        if decoded == text:
            return target
        text = decoded
    return "/"


def _local_path(text: str) -> bool:
    if any(ch == "\\" or ch.isspace() or not ch.isprintable() for ch in text):
        return False
    if not text.startswith("/") or text.startswith("//"):
        return False
    parts = urlsplit(text)
    if parts.scheme or parts.netloc:
        return False
    return not _without_dot_segments(parts.path).startswith("//")


def _without_dot_segments(path: str) -> str:
    """`path` with `.` and `..` resolved as a browser resolves them (also percent-encoded)."""
    kept: list[str] = []
    segments = path.split("/")[1:]
    for segment in segments:
        dots = _DOT_SEGMENTS.get(segment.lower(), 0)
        if dots == 2 and kept:
            kept.pop()
        elif dots == 0:
            kept.append(segment)
    if segments and _DOT_SEGMENTS.get(segments[-1].lower(), 0):
        kept.append("")  # a dot-segment last leaves its slash: `/a/.` is `/a/`, `/.//.` is `//`
    return "/" + "/".join(kept)
