"""The environment's side of the configuration: each `CONTINUITY_*` variable (and NATS_URL,
REDIS_URL) read, checked and turned into the value of a field of `shared.platform.config.Config`.

A bad value raises `ConfigError` with a message naming the variable, never its value when the
value may be secret. `read` gives the fields' values by name; `Config.from_env` builds the
object from them.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit


class ConfigError(ValueError):
    """A configuration variable has a value that cannot be used."""


MIB = 1024 * 1024

N = TypeVar("N", int, float)

INBOX_PREFIX_VARIABLE = "CONTINUITY_NATS_INBOX_PREFIX"

# Literal subject tokens: no wildcard, no empty token, no space; nats-py adds `.<id>` itself.
_INBOX_PREFIX = re.compile(r"^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$:-]+)*\Z")


def inbox_prefix_setting(env: Mapping[str, str]) -> str:
    """CONTINUITY_NATS_INBOX_PREFIX: literal subject tokens without a trailing `.`, or ''."""
    value = env.get(INBOX_PREFIX_VARIABLE, "").strip()
    if value and not _INBOX_PREFIX.match(value):
        raise ConfigError(
            f"{INBOX_PREFIX_VARIABLE}: {value!r} must be literal subject tokens such as "
            "_INBOX.classifier (no wildcard, no trailing '.')"
        )
    return value


MAX_IN_FLIGHT = 4096
"""The most messages a durable consumer leaves unacknowledged (its `max_ack_pending`), so the
most one replica may hold."""


def nats_url_uses_tls(url: str) -> bool:
    """Whether NATS_URL asks for TLS (`tls://`, or `wss://` for websockets); a mix of TLS and
    plain servers is refused, since a reconnect could silently drop TLS."""
    uses_tls = {u.partition("://")[0].lower() in ("tls", "wss") for u in server_list(url)}
    if uses_tls == {True, False}:
        raise ConfigError("NATS_URL: mixes tls:// and plain servers; use tls:// for all of them")
    return uses_tls == {True}


def redis_url_uses_tls(url: str) -> bool:
    """Whether REDIS_URL asks for TLS (`rediss://`)."""
    return url.strip().lower().startswith("rediss://")


def tls_files(
    env: Mapping[str, str], prefix: str, *, enabled: bool, url_variable: str
) -> tuple[str, str, str]:
    """`<prefix>_CA`, `_CERT` and `_KEY` from `env`: readable files, a certificate only with
    its key, and none of them unless the URL turns TLS on (they would silently do nothing)."""
    names = (f"{prefix}_CA", f"{prefix}_CERT", f"{prefix}_KEY")
    ca, cert, key = (env.get(name, "").strip() for name in names)
    for name, path in zip(names, (ca, cert, key), strict=True):
        if not path:
            continue
        if not enabled:
            scheme = "tls://" if url_variable == "NATS_URL" else "rediss://"
            raise ConfigError(f"{name} is set but {url_variable} does not use {scheme}: TLS would be off")
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise ConfigError(f"{name}: no readable file at {path}")
    if bool(cert) != bool(key):
        raise ConfigError(f"{names[1]} and {names[2]}: give both (mutual TLS) or neither")
    return ca, cert, key


# A host name only: no scheme, port or path, which would never match a certificate.
_SERVER_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?\Z")


def tls_server_name(env: Mapping[str, str], prefix: str, *, enabled: bool, url_variable: str) -> str:
    """`<prefix>_SERVER_NAME`: a DNS name the server's certificate must carry instead of the
    URL's host (a port-forward dials 127.0.0.1); only with a TLS URL, like the files."""
    name = f"{prefix}_SERVER_NAME"
    value = env.get(name, "").strip()
    if value and not enabled:
        scheme = "tls://" if url_variable == "NATS_URL" else "rediss://"
        raise ConfigError(f"{name} is set but {url_variable} does not use {scheme}: TLS would be off")
    if value and not _SERVER_NAME.match(value):
        raise ConfigError(f"{name}: a DNS name such as nats.nats.svc.cluster.local, without scheme or port")
    return value


def server_list(url: str) -> list[str]:
    """The servers of a NATS_URL: one URL, or several separated by commas (a cluster)."""
    return [u.strip() for u in url.split(",") if u.strip()]


def parse_runner_keys(raw: str) -> dict[str, bytes]:
    """Parse `k1=<base64>,k2=<base64>`; errors name the key id, never the key material."""
    keys: dict[str, bytes] = {}
    for i, item in enumerate(p.strip() for p in raw.split(",")):
        if not item:
            continue
        key_id, sep, material = item.partition("=")
        key_id = key_id.strip()
        if not sep or not key_id:
            raise ConfigError(f"CONTINUITY_RUNNER_KEYS: entry {i + 1} is not of the form id=<base64>")
        try:
            secret = base64.b64decode(material.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"CONTINUITY_RUNNER_KEYS: key {key_id!r} is not valid base64") from None
        if len(secret) < 16:
            raise ConfigError(f"CONTINUITY_RUNNER_KEYS: key {key_id!r} is shorter than 16 bytes")
        if key_id in keys:
            raise ConfigError(f"CONTINUITY_RUNNER_KEYS: key {key_id!r} is given twice")
        keys[key_id] = secret
    return keys


def _str(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, "").strip()
    return value or default


def _secret(path: str, name: str) -> str:
    """The password in the file `path` (without its line break); the message names `name`,
    never the value."""
    try:
        with open(path, encoding="utf-8") as f:
            value = f.read().strip("\r\n")
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"{name}: {path!r} is not a readable file") from None
    if not _URL_SAFE.match(value):
        # Written into the URL as it is (nats-py does not decode a URL's password).
        raise ConfigError(
            f"{name}: {path!r} must hold one line, the password: letters, digits, '-', '.', '_', '~'"
        )
    return value


_URL_SAFE = re.compile(r"^[A-Za-z0-9._~-]+\Z")


def url_with_password(url: str, variable: str, password: str) -> str:
    """`url` (every server of a comma-separated list) with `password` for the user it names;
    a URL that names no user, or carries a password already, is refused."""
    servers = []
    for server in (part.strip() for part in url.split(",")):
        parts = urlsplit(server)
        if not parts.username:
            raise ConfigError(f"{variable}: name the user whose password the password file holds")
        if parts.password is not None:
            raise ConfigError(f"{variable}: carries a password, and a password file names one too")
        host = parts.netloc.rpartition("@")[2]
        netloc = f"{parts.username}:{password}@{host}"
        servers.append(urlunsplit(parts._replace(netloc=netloc)))
    return ",".join(servers)


def _file(env: Mapping[str, str], name: str) -> str | None:
    path = env.get(name, "").strip()
    if not path:
        return None
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise ConfigError(f"{name}: {path!r} is not a readable file")
    return path


def _password_file(env: Mapping[str, str], name: str) -> str | None:
    """A password file, checked now (its value is read again by whoever connects with it)."""
    path = _file(env, name)
    if path is not None:
        password_of(path, name)
    return path


def password_of(path: str, name: str) -> str:
    """The password in the file `path` of the variable `name` (checked as NATS_URL's is)."""
    return _secret(path, name)


def _prefixes(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    prefixes = tuple(p.strip() for p in raw.split(",") if p.strip())
    for p in prefixes:
        # A prefix ends a subject token, so `_INBOX.` cannot match `_INBOXES.x`.
        if not p.endswith(".") or any(c in p for c in " *>"):
            raise ConfigError(f"{name}: {p!r} must be literal subject tokens ending with '.'")
    return prefixes


def _given(
    env: Mapping[str, str], name: str, convert: Callable[[str], N], expected: str
) -> tuple[str, N] | None:
    """The variable as written and converted, or None when it is unset or blank."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return raw, convert(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected {expected}, got {raw!r}") from None


def _int(env: Mapping[str, str], name: str, default: int, *, lo: int, hi: int) -> int:
    given = _given(env, name, int, "a whole number")
    if given is None:
        return default
    _, value = given
    if not lo <= value <= hi:
        raise ConfigError(f"{name}: must be between {lo} and {hi}, got {value}")
    return value


_UNITS = {"": 1, "Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB}
_SIZE = re.compile(r"^([0-9]+)(Ki|Mi|Gi)?\Z")


def _bytes(env: Mapping[str, str], name: str, default: int) -> int:
    """A size: a whole number of bytes, or of Ki, Mi or Gi; from 1 MiB to 1 TiB."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    found = _SIZE.match(raw)
    if found is None:
        raise ConfigError(f"{name}: expected bytes such as 1073741824 or 1Gi, got {raw!r}")
    value = int(found.group(1)) * _UNITS[found.group(2) or ""]
    if not MIB <= value <= 1024 * 1024 * MIB:
        raise ConfigError(f"{name}: must be between 1Mi and 1024Gi, got {raw}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    """Seconds: more than 0 and less than a day."""
    return _number(
        env, name, default, unit="a number of seconds", above=0, below=86_400, bound="less than a day"
    )


def _rate(env: Mapping[str, str], name: str, default: float) -> float:
    """Events a second: more than 0 and at most 1e9."""
    return _number(
        env, name, default, unit="a number of events a second", above=0, below=1e9 + 1, bound="at most 1e9"
    )


def _number(
    env: Mapping[str, str], name: str, default: float, *, unit: str, above: float, below: float, bound: str
) -> float:
    given = _given(env, name, float, unit)
    if given is None:
        return default
    raw, value = given
    if not above < value < below:
        raise ConfigError(f"{name}: must be more than {above:g} and {bound}, got {raw}")
    return value


def _linger(env: Mapping[str, str], name: str, default: float) -> float:
    """Seconds: more than 0 and at most a year."""
    return _number(
        env, name, default, unit="a number of seconds", above=0, below=366 * 86_400, bound="at most a year"
    )


MAX_RETENTION_DAYS = 3650.0


def _days(env: Mapping[str, str], name: str, default: float) -> float:
    given = _given(env, name, float, "a number of days")
    if given is None:
        return default
    raw, value = given
    # At least a millisecond (the unit of the keys' expiry), at most ten years.
    if not 1 / 86_400_000 <= value <= MAX_RETENTION_DAYS:
        raise ConfigError(f"{name}: must be more than 0 and at most {MAX_RETENTION_DAYS:g} days, got {raw}")
    return value


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = env.get(name, "").strip().upper()
    if not raw:
        return default
    if raw not in choices:
        raise ConfigError(f"{name}: must be one of {', '.join(choices)}, got {raw!r}")
    return raw


Parse = Callable[[Mapping[str, str], str, Any], Any]
"""Reads one variable: `parse(env, name, default)`, the field's value (its default when unset)."""

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_CLUSTER = ("AUTO", "ON", "OFF")
_TENANCY = ("ENFORCED", "OPEN")
_CLAIMS = ("REFUSE", "ALLOW")
NATS_TLS_PREFIX = "CONTINUITY_NATS_TLS"
REDIS_TLS_PREFIX = "CONTINUITY_REDIS_TLS"


def read(env: Mapping[str, str], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The value of every field of `Config` from `env`, by field name; `defaults` holds the
    values of unset variables, by field name."""
    values = _connections(env, nats_url=defaults["nats_url"], redis_url=defaults["redis_url"])
    for field, variable, parse in SETTINGS:
        values[field] = parse(env, variable, defaults[field])
    return values


def _connections(env: Mapping[str, str], *, nats_url: str, redis_url: str) -> dict[str, Any]:
    """NATS_URL and REDIS_URL with the passwords of their files, and their TLS settings."""
    nats_url = _str(env, "NATS_URL", nats_url)
    redis_url = _str(env, "REDIS_URL", redis_url)
    nats_password_file = env.get("CONTINUITY_NATS_PASSWORD_FILE", "").strip()
    if nats_password_file:
        nats_url = url_with_password(
            nats_url, "NATS_URL", _secret(nats_password_file, "CONTINUITY_NATS_PASSWORD_FILE")
        )
    redis_password_file = env.get("CONTINUITY_REDIS_PASSWORD_FILE", "").strip()
    if redis_password_file:
        redis_url = url_with_password(
            redis_url, "REDIS_URL", _secret(redis_password_file, "CONTINUITY_REDIS_PASSWORD_FILE")
        )
    if any(name.lower().startswith("ssl") for name in parse_qs(urlsplit(redis_url).query)):
        # One home for TLS settings, and no way around verification through the URL.
        raise ConfigError("REDIS_URL: TLS settings go in CONTINUITY_REDIS_TLS_*, not in the URL")
    return {
        "nats_url": nats_url,
        "redis_url": redis_url,
        "nats_password_file": nats_password_file,
        "redis_password_file": redis_password_file,
        **_tls(env, "nats", NATS_TLS_PREFIX, enabled=nats_url_uses_tls(nats_url), url_variable="NATS_URL"),
        **_tls(
            env, "redis", REDIS_TLS_PREFIX, enabled=redis_url_uses_tls(redis_url), url_variable="REDIS_URL"
        ),
    }


def _tls(
    env: Mapping[str, str], field: str, prefix: str, *, enabled: bool, url_variable: str
) -> dict[str, str]:
    """`<field>_tls_ca`, `_cert`, `_key` and `_server_name` from `<prefix>_*`."""
    ca, cert, key = tls_files(env, prefix, enabled=enabled, url_variable=url_variable)
    server_name = tls_server_name(env, prefix, enabled=enabled, url_variable=url_variable)
    return {
        f"{field}_tls_ca": ca,
        f"{field}_tls_cert": cert,
        f"{field}_tls_key": key,
        f"{field}_tls_server_name": server_name,
    }


def _whole(*, lo: int, hi: int) -> Parse:
    return functools.partial(_int, lo=lo, hi=hi)


def _one_of(choices: tuple[str, ...]) -> Parse:
    """One of `choices`, in any case; the field holds it in lower case."""

    def parse(env: Mapping[str, str], name: str, default: str) -> str:
        return _choice(env, name, default.upper(), choices).lower()

    return parse


def _verbatim(env: Mapping[str, str], name: str, default: str) -> str:
    return env.get(name, default)


SETTINGS: tuple[tuple[str, str, Parse], ...] = (
    ("nats_nkey_seed_file", "CONTINUITY_NATS_NKEY_SEED_FILE", lambda env, name, _: _file(env, name)),
    ("nats_creds_file", "CONTINUITY_NATS_CREDS_FILE", lambda env, name, _: _file(env, name)),
    ("nats_archive_creds_file", "CONTINUITY_NATS_ARCHIVE_CREDS_FILE", lambda env, name, _: _file(env, name)),
    ("nats_monitor_creds_file", "CONTINUITY_NATS_MONITOR_CREDS_FILE", lambda env, name, _: _file(env, name)),
    (
        "nats_monitor_password_file",
        "CONTINUITY_NATS_MONITOR_PASSWORD_FILE",
        lambda env, name, _: _password_file(env, name),
    ),
    ("nats_inbox_prefix", INBOX_PREFIX_VARIABLE, lambda env, _name, _: inbox_prefix_setting(env)),
    ("reply_prefixes", "CONTINUITY_REPLY_PREFIXES", _prefixes),
    ("redis_cluster", "CONTINUITY_REDIS_CLUSTER", _one_of(_CLUSTER)),
    ("redis_wait_replicas", "CONTINUITY_REDIS_WAIT_REPLICAS", _whole(lo=0, hi=64)),
    ("redis_wait_timeout_ms", "CONTINUITY_REDIS_WAIT_TIMEOUT_MS", _whole(lo=1, hi=60_000)),
    ("redis_wait_aof_local", "CONTINUITY_REDIS_WAIT_AOF_LOCAL", _whole(lo=0, hi=1)),
    ("redis_wait_aof_replicas", "CONTINUITY_REDIS_WAIT_AOF_REPLICAS", _whole(lo=0, hi=64)),
    ("runner_keys", "CONTINUITY_RUNNER_KEYS", lambda env, name, _: parse_runner_keys(env.get(name, ""))),
    ("archive_timeout_s", "CONTINUITY_ARCHIVE_TIMEOUT_S", _float),
    ("metrics_host", "CONTINUITY_METRICS_HOST", _str),
    ("metrics_port", "CONTINUITY_METRICS_PORT", _whole(lo=0, hi=65535)),
    ("stream_replicas", "CONTINUITY_STREAM_REPLICAS", _whole(lo=1, hi=5)),
    ("duplicate_window_s", "CONTINUITY_DUPLICATE_WINDOW_S", _float),
    ("events_max_bytes", "CONTINUITY_EVENTS_MAX_BYTES", _bytes),
    ("decisions_max_bytes", "CONTINUITY_DECISIONS_MAX_BYTES", _bytes),
    ("work_max_bytes", "CONTINUITY_WORK_MAX_BYTES", _bytes),
    ("dead_max_bytes", "CONTINUITY_DEAD_MAX_BYTES", _bytes),
    ("stream_messages_per_runner", "CONTINUITY_STREAM_MESSAGES_PER_RUNNER", _whole(lo=1, hi=10**9)),
    ("max_deliver", "CONTINUITY_MAX_DELIVER", _whole(lo=1, hi=1000)),
    ("nak_delay_s", "CONTINUITY_NAK_DELAY_S", _float),
    ("ack_wait_s", "CONTINUITY_ACK_WAIT_S", _float),
    ("retry_backoff_s", "CONTINUITY_RETRY_BACKOFF_S", _float),
    ("drain_timeout_s", "CONTINUITY_DRAIN_TIMEOUT_S", _float),
    ("outcome_wait_s", "CONTINUITY_OUTCOME_WAIT_S", _float),
    ("request_concurrency", "CONTINUITY_REQUEST_CONCURRENCY", _whole(lo=1, hi=100_000)),
    ("consumer_in_flight", "CONTINUITY_CONSUMER_IN_FLIGHT", _whole(lo=1, hi=MAX_IN_FLIGHT)),
    ("runner_in_flight", "CONTINUITY_RUNNER_IN_FLIGHT", _whole(lo=1, hi=MAX_IN_FLIGHT)),
    ("runner_event_rate", "CONTINUITY_RUNNER_EVENT_RATE", _rate),
    ("runner_event_burst", "CONTINUITY_RUNNER_EVENT_BURST", _whole(lo=1, hi=10**9)),
    ("tenant_event_rate", "CONTINUITY_TENANT_EVENT_RATE", _rate),
    ("tenant_event_burst", "CONTINUITY_TENANT_EVENT_BURST", _whole(lo=1, hi=10**9)),
    ("runner_stored_runs", "CONTINUITY_RUNNER_STORED_RUNS", _whole(lo=1, hi=10**12)),
    ("tenant_stored_runs", "CONTINUITY_TENANT_STORED_RUNS", _whole(lo=1, hi=10**12)),
    ("tenant_recovery_budget", "CONTINUITY_TENANT_RECOVERY_BUDGET", _whole(lo=1, hi=10**9)),
    ("tenant_recovery_window_s", "CONTINUITY_TENANT_RECOVERY_WINDOW_S", _float),
    ("log_level", "CONTINUITY_LOG_LEVEL", functools.partial(_choice, choices=_LEVELS)),
    ("retention_days", "CONTINUITY_RETENTION_DAYS", _days),
    ("archive_retention_days", "CONTINUITY_ARCHIVE_RETENTION_DAYS", _days),
    ("history_linger_s", "CONTINUITY_HISTORY_LINGER_S", _linger),
    ("history_max_bytes", "CONTINUITY_HISTORY_MAX_BYTES", _bytes),
    ("tenancy", "CONTINUITY_TENANCY", _one_of(_TENANCY)),
    ("session_claims", "CONTINUITY_SESSION_CLAIMS", _one_of(_CLAIMS)),
    ("runner_cache_s", "CONTINUITY_RUNNER_CACHE_S", _float),
    ("policy_file", "CONTINUITY_POLICY_FILE", _verbatim),
)
"""The fields read from one variable each: (field, variable, how it is read), in the order
they are read (NATS_URL, REDIS_URL and TLS, read together, come first)."""
