"""Configuration from environment variables, as one typed object.

Every field has a docstring and a default that suits a developer's machine; production sets
the variables (see deploy/). A bad value fails at start with a message naming the variable,
never its value when the value may be secret.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import difflib
import functools
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit, urlunsplit


class ConfigError(ValueError):
    """A configuration variable has a value that cannot be used."""


MIB = 1024 * 1024


@dataclass(frozen=True)
class Config:
    nats_url: str = "nats://127.0.0.1:4222"
    """NATS_URL: one or more comma-separated NATS server URLs."""

    nats_nkey_seed_file: str | None = None
    """CONTINUITY_NATS_NKEY_SEED_FILE: a file holding the NKEY seed to authenticate with (a user
    and password go in NATS_URL instead, `nats://user:password@host:4222`)."""

    nats_inbox_prefix: str = ""
    """CONTINUITY_NATS_INBOX_PREFIX: the prefix of this process's reply subjects (its inboxes);
    unset, `_INBOX.<name>` after the process (`_INBOX.classifier`, `_INBOX.console`, ...; the
    `continuity` command: `_INBOX.operator`): under deploy/nats/auth.conf each user may subscribe
    only below its own prefix, so no other user reads its replies."""

    reply_prefixes: tuple[str, ...] = ("_INBOX.", "_R_.")
    """CONTINUITY_REPLY_PREFIXES: comma-separated prefixes of the reply subjects a service answers
    (inboxes, and `_R_.`, the server's replies to a service import); any other request is dropped."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    """REDIS_URL: the Redis (or Redis-compatible) server holding every record; on Redis Cluster,
    any one node of the cluster (the others are found from it)."""

    nats_password_file: str = ""
    """CONTINUITY_NATS_PASSWORD_FILE: a file holding the password of the user NATS_URL names
    (`tls://classifier@nats:4222`), which then carries none: the password is in neither the
    URL nor the environment. `nats_url` holds the URL with it."""

    redis_password_file: str = ""
    """CONTINUITY_REDIS_PASSWORD_FILE: the same for the Redis user REDIS_URL names
    (`rediss://classifier@redis:6379/0`); `redis_url` holds the URL with it."""

    redis_cluster: str = "auto"
    """CONTINUITY_REDIS_CLUSTER: `auto` (ask the server: `INFO cluster`), `on` or `off`."""

    redis_wait_replicas: int = 0
    """CONTINUITY_REDIS_WAIT_REPLICAS: replicas that must hold a session commit before it is
    acknowledged (Redis `WAIT` right after the commit script); 0, the default, waits for none.
    A commit fewer replicas hold within CONTINUITY_REDIS_WAIT_TIMEOUT_MS is answered
    `unavailable` (retryable): it may or may not survive a failover, as if it had timed out."""

    redis_wait_timeout_ms: int = 200
    """CONTINUITY_REDIS_WAIT_TIMEOUT_MS: how long a commit waits for those replicas."""

    nats_tls_ca: str = ""
    """CONTINUITY_NATS_TLS_CA: PEM file of the CA that signs the NATS servers' certificates;
    unset, the system's trust store. TLS itself is turned on by `tls://` URLs in NATS_URL."""

    nats_tls_cert: str = ""
    """CONTINUITY_NATS_TLS_CERT: PEM client certificate (chain) presented to NATS servers that
    require mutual TLS; needs CONTINUITY_NATS_TLS_KEY."""

    nats_tls_key: str = ""
    """CONTINUITY_NATS_TLS_KEY: PEM file of that certificate's (unencrypted) private key."""

    nats_tls_server_name: str = ""
    """CONTINUITY_NATS_TLS_SERVER_NAME: the name the NATS servers' certificates are checked
    against instead of the URL's host, for a port-forward (`tls://127.0.0.1:14222` reaching
    `nats.nats.svc.cluster.local`); unset, the URL's host."""

    redis_tls_ca: str = ""
    """CONTINUITY_REDIS_TLS_CA: PEM file of the CA that signs the Redis server's certificate;
    unset, the system's trust store. TLS itself is turned on by a `rediss://` REDIS_URL."""

    redis_tls_cert: str = ""
    """CONTINUITY_REDIS_TLS_CERT: PEM client certificate (chain) presented to a Redis that
    requires mutual TLS (`tls-auth-clients yes`); needs CONTINUITY_REDIS_TLS_KEY."""

    redis_tls_key: str = ""
    """CONTINUITY_REDIS_TLS_KEY: PEM file of that certificate's (unencrypted) private key."""

    redis_tls_server_name: str = ""
    """CONTINUITY_REDIS_TLS_SERVER_NAME: the same for the Redis server's certificate."""

    runner_keys: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    """CONTINUITY_RUNNER_KEYS: `k1=<base64>,k2=<base64>`, the live HMAC keys of runners' command
    results; several may be live at once for rotation."""

    archive_timeout_s: float = 30.0
    """CONTINUITY_ARCHIVE_TIMEOUT_S: how long the archiver waits for a runner's remote move."""

    metrics_host: str = "0.0.0.0"
    """CONTINUITY_METRICS_HOST: address of the `/metrics`, `/healthz` and `/readyz` server."""

    metrics_port: int = 9464
    """CONTINUITY_METRICS_PORT: its port; 0 picks a free one."""

    stream_replicas: int = 1
    """CONTINUITY_STREAM_REPLICAS: JetStream replicas of every stream (3 in production)."""

    duplicate_window_s: float = 120.0
    """CONTINUITY_DUPLICATE_WINDOW_S: the streams' `Nats-Msg-Id` duplicate window."""

    events_max_bytes: int = 1024 * MIB
    """CONTINUITY_EVENTS_MAX_BYTES: what CONTINUITY_EVENTS may hold (bytes, or with Ki, Mi or
    Gi); full, its oldest events go. JetStream reserves every stream's size in the server's
    store (`max_file_store`): the four together must fit it."""

    decisions_max_bytes: int = 1024 * MIB
    """CONTINUITY_DECISIONS_MAX_BYTES: the same for CONTINUITY_DECISIONS."""

    work_max_bytes: int = 256 * MIB
    """CONTINUITY_WORK_MAX_BYTES: the same for CONTINUITY_WORK, which refuses new work items when
    full (their publishers try again) rather than drop waiting ones."""

    dead_max_bytes: int = 512 * MIB
    """CONTINUITY_DEAD_MAX_BYTES: the same for CONTINUITY_DEAD; full, its oldest letters go."""

    stream_messages_per_runner: int = 2048
    """CONTINUITY_STREAM_MESSAGES_PER_RUNNER: the messages of one runner CONTINUITY_EVENTS and
    CONTINUITY_DECISIONS keep (`max_msgs_per_subject`: each of their subjects names one runner);
    past it that runner's oldest go, never another runner's."""

    max_deliver: int = 5
    """CONTINUITY_MAX_DELIVER: deliveries of a message before it moves to `continuity.dead.exhausted`."""

    nak_delay_s: float = 1.0
    """CONTINUITY_NAK_DELAY_S: redelivery delay after a transient failure (Redis or NATS down)."""

    ack_wait_s: float = 30.0
    """CONTINUITY_ACK_WAIT_S: how long JetStream waits for an ack before redelivering."""

    retry_backoff_s: float = 5.0
    """CONTINUITY_RETRY_BACKOFF_S: base of `not_before` for `retry_same_session` (doubles per attempt)."""

    drain_timeout_s: float = 10.0
    """CONTINUITY_DRAIN_TIMEOUT_S: how long a SIGTERM drain may take before the process exits,
    all of it: the service's parts share it, and closing the NATS connection gets what they
    left, at least one second."""

    outcome_wait_s: float = 3600.0
    """CONTINUITY_OUTCOME_WAIT_S: how long a run decided `retry_same_session`, `open_replacement`
    or `continue_fresh` may wait for its `turn_completed` before it is `abandoned` (contract 4.6)."""

    request_concurrency: int = 256
    """CONTINUITY_REQUEST_CONCURRENCY: requests one replica handles at once."""

    consumer_in_flight: int = 256
    """CONTINUITY_CONSUMER_IN_FLIGHT: messages of one durable consumer a replica handles at once.
    They are asked for as slots free up, at least a quarter of them per pull request under load:
    the more in hand, the more of their Redis commands and publications share one write."""

    runner_in_flight: int = 128
    """CONTINUITY_RUNNER_IN_FLIGHT: events of one runner the classifier handles at once (its
    share of CONTINUITY_CONSUMER_IN_FLIGHT); the classifier holds more, and starts them by
    runner in turn, so one runner's flood cannot delay another's decisions."""

    runner_event_rate: float = 200.0
    """CONTINUITY_RUNNER_EVENT_RATE: events a second one runner may send, per classifier replica;
    past it (and its burst) an event is refused `quota_exceeded`, with when to send it again."""

    runner_event_burst: int = 1000
    """CONTINUITY_RUNNER_EVENT_BURST: events one runner may send at once above its rate."""

    tenant_event_rate: float = 2000.0
    """CONTINUITY_TENANT_EVENT_RATE: the same for all runners of one tenant together."""

    tenant_event_burst: int = 10000
    """CONTINUITY_TENANT_EVENT_BURST: a tenant's burst above its rate."""

    runner_stored_runs: int = 100_000
    """CONTINUITY_RUNNER_STORED_RUNS: runs one runner may start within the retention (their
    records are kept that long); past it, a new run's event is refused `quota_exceeded`."""

    tenant_stored_runs: int = 1_000_000
    """CONTINUITY_TENANT_STORED_RUNS: the same for all runners of one tenant."""

    tenant_recovery_budget: int = 1000
    """CONTINUITY_TENANT_RECOVERY_BUDGET: retries and replacements the classifier decides for one
    tenant per window; past it, such an event stops for an operator with the reason
    `tenant_recovery_budget_exhausted` (the storm breaker)."""

    tenant_recovery_window_s: float = 600.0
    """CONTINUITY_TENANT_RECOVERY_WINDOW_S: the storm breaker's window."""

    log_level: str = "INFO"
    """CONTINUITY_LOG_LEVEL: DEBUG, INFO, WARNING or ERROR."""

    retention_days: float = 30.0
    """CONTINUITY_RETENTION_DAYS: how long the records of a finished run (run record, decision
    slots, audit trail, run index, archive progress, a delivered reconciliation and its index
    entry, outbox remnants) are kept after its last step; a fraction of a day is allowed
    (tests use seconds). A run waiting on an operator or an open reconciliation never expires
    (docs/contract-v1.md, section 9.9)."""

    archive_retention_days: float = 90.0
    """CONTINUITY_ARCHIVE_RETENTION_DAYS: how long an archive copy of a session record
    (`continuity:archive:{<sk>}:<archive_id>`, and the copy of a held record kept when a new
    session is committed over it) is kept after it was made."""

    tenancy: str = "enforced"
    """CONTINUITY_TENANCY: `enforced` (a runner the runner directory does not know acts on
    nothing) or `open` (it may act on any tenant: a development stack without authorization).
    Issued runners act only on their tenants' sessions either way (docs/contract-v1.md, 10)."""

    session_claims: str = "refuse"
    """CONTINUITY_SESSION_CLAIMS: `refuse` or `allow` a runner's claim of a session another
    runner of its tenant owns (runner pools where a task moves to another host); an operator's
    transfer is always possible."""

    runner_cache_s: float = 2.0
    """CONTINUITY_RUNNER_CACHE_S: how long a replica keeps a runner's directory record before
    reading it again: a runner issued, revoked or given other tenants is seen within it."""

    policy_file: str = ""
    """CONTINUITY_POLICY_FILE: a decision policy (docs/policies.md) the classifier and the
    session-store decide by instead of the shipped one; checked against the invariants at start,
    and a policy that breaks one stops the start. Empty: the shipped policy."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        d = cls()
        nats_url = _str(env, "NATS_URL", d.nats_url)
        redis_url = _str(env, "REDIS_URL", d.redis_url)
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
        nats_ca, nats_cert, nats_key = tls_files(
            env, NATS_TLS_PREFIX, enabled=nats_url_uses_tls(nats_url), url_variable="NATS_URL"
        )
        redis_ca, redis_cert, redis_key = tls_files(
            env, REDIS_TLS_PREFIX, enabled=redis_url_uses_tls(redis_url), url_variable="REDIS_URL"
        )
        config = cls(
            nats_url=nats_url,
            nats_nkey_seed_file=_file(env, "CONTINUITY_NATS_NKEY_SEED_FILE"),
            nats_inbox_prefix=inbox_prefix_setting(env),
            reply_prefixes=_prefixes(env, "CONTINUITY_REPLY_PREFIXES", d.reply_prefixes),
            redis_url=redis_url,
            nats_password_file=nats_password_file,
            redis_password_file=redis_password_file,
            redis_cluster=_choice(env, "CONTINUITY_REDIS_CLUSTER", d.redis_cluster.upper(), _CLUSTER).lower(),
            redis_wait_replicas=_int(
                env, "CONTINUITY_REDIS_WAIT_REPLICAS", d.redis_wait_replicas, lo=0, hi=64
            ),
            redis_wait_timeout_ms=_int(
                env, "CONTINUITY_REDIS_WAIT_TIMEOUT_MS", d.redis_wait_timeout_ms, lo=1, hi=60_000
            ),
            nats_tls_ca=nats_ca,
            nats_tls_cert=nats_cert,
            nats_tls_key=nats_key,
            redis_tls_ca=redis_ca,
            redis_tls_cert=redis_cert,
            redis_tls_key=redis_key,
            nats_tls_server_name=tls_server_name(
                env, NATS_TLS_PREFIX, enabled=nats_url_uses_tls(nats_url), url_variable="NATS_URL"
            ),
            redis_tls_server_name=tls_server_name(
                env, REDIS_TLS_PREFIX, enabled=redis_url_uses_tls(redis_url), url_variable="REDIS_URL"
            ),
            runner_keys=parse_runner_keys(env.get("CONTINUITY_RUNNER_KEYS", "")),
            archive_timeout_s=_float(env, "CONTINUITY_ARCHIVE_TIMEOUT_S", d.archive_timeout_s),
            metrics_host=_str(env, "CONTINUITY_METRICS_HOST", d.metrics_host),
            metrics_port=_int(env, "CONTINUITY_METRICS_PORT", d.metrics_port, lo=0, hi=65535),
            stream_replicas=_int(env, "CONTINUITY_STREAM_REPLICAS", d.stream_replicas, lo=1, hi=5),
            duplicate_window_s=_float(env, "CONTINUITY_DUPLICATE_WINDOW_S", d.duplicate_window_s),
            events_max_bytes=_bytes(env, "CONTINUITY_EVENTS_MAX_BYTES", d.events_max_bytes),
            decisions_max_bytes=_bytes(env, "CONTINUITY_DECISIONS_MAX_BYTES", d.decisions_max_bytes),
            work_max_bytes=_bytes(env, "CONTINUITY_WORK_MAX_BYTES", d.work_max_bytes),
            dead_max_bytes=_bytes(env, "CONTINUITY_DEAD_MAX_BYTES", d.dead_max_bytes),
            stream_messages_per_runner=_int(
                env, "CONTINUITY_STREAM_MESSAGES_PER_RUNNER", d.stream_messages_per_runner, lo=1, hi=10**9
            ),
            max_deliver=_int(env, "CONTINUITY_MAX_DELIVER", d.max_deliver, lo=1, hi=1000),
            nak_delay_s=_float(env, "CONTINUITY_NAK_DELAY_S", d.nak_delay_s),
            ack_wait_s=_float(env, "CONTINUITY_ACK_WAIT_S", d.ack_wait_s),
            retry_backoff_s=_float(env, "CONTINUITY_RETRY_BACKOFF_S", d.retry_backoff_s),
            drain_timeout_s=_float(env, "CONTINUITY_DRAIN_TIMEOUT_S", d.drain_timeout_s),
            outcome_wait_s=_float(env, "CONTINUITY_OUTCOME_WAIT_S", d.outcome_wait_s),
            request_concurrency=_int(
                env, "CONTINUITY_REQUEST_CONCURRENCY", d.request_concurrency, lo=1, hi=100_000
            ),
            consumer_in_flight=_int(
                env, "CONTINUITY_CONSUMER_IN_FLIGHT", d.consumer_in_flight, lo=1, hi=MAX_IN_FLIGHT
            ),
            runner_in_flight=_int(
                env, "CONTINUITY_RUNNER_IN_FLIGHT", d.runner_in_flight, lo=1, hi=MAX_IN_FLIGHT
            ),
            runner_event_rate=_rate(env, "CONTINUITY_RUNNER_EVENT_RATE", d.runner_event_rate),
            runner_event_burst=_int(
                env, "CONTINUITY_RUNNER_EVENT_BURST", d.runner_event_burst, lo=1, hi=10**9
            ),
            tenant_event_rate=_rate(env, "CONTINUITY_TENANT_EVENT_RATE", d.tenant_event_rate),
            tenant_event_burst=_int(
                env, "CONTINUITY_TENANT_EVENT_BURST", d.tenant_event_burst, lo=1, hi=10**9
            ),
            runner_stored_runs=_int(
                env, "CONTINUITY_RUNNER_STORED_RUNS", d.runner_stored_runs, lo=1, hi=10**12
            ),
            tenant_stored_runs=_int(
                env, "CONTINUITY_TENANT_STORED_RUNS", d.tenant_stored_runs, lo=1, hi=10**12
            ),
            tenant_recovery_budget=_int(
                env, "CONTINUITY_TENANT_RECOVERY_BUDGET", d.tenant_recovery_budget, lo=1, hi=10**9
            ),
            tenant_recovery_window_s=_float(
                env, "CONTINUITY_TENANT_RECOVERY_WINDOW_S", d.tenant_recovery_window_s
            ),
            log_level=_choice(env, "CONTINUITY_LOG_LEVEL", d.log_level, _LEVELS),
            retention_days=_days(env, "CONTINUITY_RETENTION_DAYS", d.retention_days),
            archive_retention_days=_days(env, "CONTINUITY_ARCHIVE_RETENTION_DAYS", d.archive_retention_days),
            tenancy=_choice(env, "CONTINUITY_TENANCY", d.tenancy.upper(), _TENANCY).lower(),
            session_claims=_choice(
                env, "CONTINUITY_SESSION_CLAIMS", d.session_claims.upper(), _CLAIMS
            ).lower(),
            runner_cache_s=_float(env, "CONTINUITY_RUNNER_CACHE_S", d.runner_cache_s),
            policy_file=env.get("CONTINUITY_POLICY_FILE", d.policy_file),
        )
        # Load the certificates now, so that an unreadable or malformed file stops the start.
        from shared.platform import tls

        tls.nats_context(config)
        tls.redis_context(config)
        return config

    def inbox_prefix(self, name: str) -> str:
        """The inbox prefix of the process `name` (a service's name, `operator` for the command):
        CONTINUITY_NATS_INBOX_PREFIX when set, else `_INBOX.<name>`."""
        return self.nats_inbox_prefix or default_inbox_prefix(name)


INBOX_PREFIX_VARIABLE = "CONTINUITY_NATS_INBOX_PREFIX"


def default_inbox_prefix(name: str) -> str:
    """`_INBOX.<name>`: the one prefix deploy/nats/auth.conf lets the user `name` subscribe below."""
    return f"_INBOX.{name}"


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

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_CLUSTER = ("AUTO", "ON", "OFF")
_TENANCY = ("ENFORCED", "OPEN")
_CLAIMS = ("REFUSE", "ALLOW")
NATS_TLS_PREFIX = "CONTINUITY_NATS_TLS"
REDIS_TLS_PREFIX = "CONTINUITY_REDIS_TLS"


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


def _int(env: Mapping[str, str], name: str, default: int, *, lo: int, hi: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a whole number, got {raw!r}") from None
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
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected {unit}, got {raw!r}") from None
    if not above < value < below:
        raise ConfigError(f"{name}: must be more than {above:g} and {bound}, got {raw}")
    return value


MAX_RETENTION_DAYS = 3650.0


def _days(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number of days, got {raw!r}") from None
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


# Every CONTINUITY_* variable -----------------------------------------------------------------
# A mistyped name (an S too many after CONTINUITY_MAX_DELIVER) would be ignored without a word,
# so each command and service names the ones nothing reads. The names come from the readers
# themselves, so that a variable added to one is known at once: Config's are recorded from
# what `Config.from_env` reads (`config_variables`), a service's own settings are declared by
# its spec (services/registry.py gathers them); only the NATS server's passwords, read by no
# Python code, are listed.

NATS_PASSWORD_VARIABLES = tuple(
    f"CONTINUITY_NATS_{user}_PASSWORD"
    for user in ("CLASSIFIER", "SESSION_STORE", "ARCHIVER", "RECONCILIATION", "OPERATOR", "CONSOLE", "SYSTEM")
)
"""The NATS server's passwords of each user (deploy/nats/auth.conf, compose, Helm): a shell
that runs the servers exports them too."""

NATS_ROUTE_VARIABLES = ("CONTINUITY_NATS_ROUTE_PASSWORD", "CONTINUITY_NATS_ROUTES")
"""The NATS servers' route password and route URLs (deploy/helm/nats-values.yaml), read by the
servers alone."""

VARIABLE_PREFIX = "CONTINUITY_"


class _Reads(Mapping[str, str]):
    """An empty environment that notes every name asked of it."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.names.add(name)
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


@functools.cache
def config_variables() -> frozenset[str]:
    """Every CONTINUITY_* variable `Config` reads, and the NATS server's passwords."""
    reads = _Reads()
    with contextlib.suppress(ConfigError):  # what was read up to a failure is still known
        Config.from_env(reads)
    config = frozenset(n for n in reads.names if n.startswith(VARIABLE_PREFIX))
    return (
        config | frozenset(NATS_PASSWORD_VARIABLES) | frozenset(NATS_ROUTE_VARIABLES) | LOCAL_SERVER_VARIABLES
    )


LOCAL_SERVER_VARIABLES = frozenset({"CONTINUITY_NATS_SERVER_BIN"})
"""Read by `continuity up` and the test fixtures when they start a server of their own
(continuity/devstack/servers.py), never by a service."""


def unknown_variables(env: Mapping[str, str], known: frozenset[str]) -> list[tuple[str, str | None]]:
    """Each CONTINUITY_* variable of `env` that is not `known`, with the known name closest to
    it (None when none is close), sorted by name."""
    suffixes = {name[len(VARIABLE_PREFIX) :]: name for name in known}
    found = []
    for name in sorted(n for n in env if n.startswith(VARIABLE_PREFIX) and n not in known):
        # Compared without the shared prefix, which would make every name look close.
        close = difflib.get_close_matches(name[len(VARIABLE_PREFIX) :], suffixes, n=1, cutoff=0.75)
        found.append((name, suffixes[close[0]] if close else None))
    return found


def unknown_variable_message(name: str, closest: str | None) -> str:
    """One line about an unknown variable, for a person."""
    hint = f"; did you mean {closest}?" if closest else ""
    return f"{name} is not a Continuity variable and is ignored{hint}"
