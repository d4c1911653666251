"""How a runner connects: servers, identity, credentials, TLS, signing keys and timeouts."""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from continuity_runner import subjects
from continuity_runner.errors import InvalidRequest
from continuity_runner.types import RUNNER_ID_PATTERN, TOKEN_PATTERN


@dataclass(frozen=True)
class RunnerOptions:
    """Options of `connect`. Secrets are kept out of `repr`."""

    runner_id: str
    """`^[A-Za-z0-9_-]{1,64}$`: a subject token, and the name of the runner's decision consumer."""
    servers: str | Sequence[str] = "nats://127.0.0.1:4222"
    """A list of URLs, or one comma-separated string."""
    nkey_seed: str | None = field(default=None, repr=False)
    """An NKey seed (`SU...`); needs the `nkeys` extra. Or `nkey_seed_file`."""
    nkey_seed_file: str | None = None
    creds_file: str | None = None
    """A creds file (user JWT and seed) of `continuity runners add --operator-dir`, for servers
    in the decentralized layout."""
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    tls_ca: str | None = None
    """A PEM file of the CA that signs the servers' certificates (default: the system's)."""
    tls_cert: str | None = None
    """With `tls_key`: the client certificate, for servers that require mutual TLS."""
    tls_key: str | None = None
    tls_context: ssl.SSLContext | None = field(default=None, repr=False)
    """A prepared context instead of `tls_ca`/`tls_cert`/`tls_key`."""
    tls_handshake_first: bool = True
    """With TLS, start it before the NATS protocol (servers with `handshake_first` in their
    `tls` block, as the shipped configuration has); TLS is on with a `tls://` URL or any of
    the `tls_` options."""
    inbox_prefix: str | None = None
    """Default `_INBOX.<runner_id>`: the shipped NATS authorization lets a runner receive replies
    only there."""
    signing_keys: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    """`{key_id: key}`: the HMAC keys the services also hold (`CONTINUITY_RUNNER_KEYS`)."""
    signing_key_id: str | None = None
    """Which of `signing_keys` signs; optional when there is only one."""
    connect_timeout: float = 5.0
    """Seconds `connect` may take to make the first connection (trying every server in turn):
    after that it raises `Unavailable`, so a runner whose NATS is unreachable, or is something
    else that accepts the connection but never speaks NATS, fails at start instead of hanging.
    Once connected, the connection reconnects forever."""
    request_timeout: float = 5.0
    """Seconds a session-store request may take before it fails with `Unavailable`."""
    publish_timeout: float = 60.0
    """Seconds `report_resume_failure` keeps retrying (through a NATS restart) before it gives up."""
    publish_attempt_timeout: float = 2.0
    """Seconds one publication waits for JetStream's acknowledgement before it is sent again."""
    publish_attempts: int = 30
    """At most this many publications of one event (all with its `Nats-Msg-Id`)."""
    redelivery_delay: float = 1.0
    """Seconds before a decision whose handler raised is delivered again."""
    create_consumer: bool = True
    """Create the decision consumer when it is missing (needs the permission to)."""
    name: str | None = None
    """The NATS connection name; default `continuity-runner-<runner_id>`."""
    trace_context: Callable[[], str | None] | None = field(default=None, repr=False)
    """Returns the `traceparent` of the work in hand, which every report and request continues
    when the call gives none (`continuity_runner.tracing.from_opentelemetry` reads
    OpenTelemetry's current span). A value that is not a traceparent is ignored: a new trace
    is started instead."""

    def __post_init__(self) -> None:
        if not isinstance(self.runner_id, str) or not re.match(RUNNER_ID_PATTERN, self.runner_id):
            raise _refused("runner_id", "must match ^[A-Za-z0-9_-]{1,64}$")
        if sum(v is not None for v in (self.nkey_seed, self.nkey_seed_file, self.creds_file)) > 1:
            raise _refused("nkey_seed", "give one of nkey_seed, nkey_seed_file and creds_file")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise _refused("tls_cert", "tls_cert and tls_key go together")
        for key_id in self.signing_keys:
            if not isinstance(key_id, str) or not re.match(TOKEN_PATTERN, key_id):
                raise _refused("signing_keys", "a signing key id must be a contract token")
        if self.signing_key_id is not None and self.signing_key_id not in self.signing_keys:
            raise _refused("signing_key_id", "signing_key_id is not one of signing_keys")
        for value, what in (
            (self.connect_timeout, "connect_timeout"),
            (self.request_timeout, "request_timeout"),
            (self.publish_timeout, "publish_timeout"),
            (self.publish_attempt_timeout, "publish_attempt_timeout"),
        ):
            if not value > 0:
                raise _refused(what, f"{what} must be above 0")
        if self.publish_attempts < 1:
            raise _refused("publish_attempts", "publish_attempts must be at least 1")
        if self.redelivery_delay < 0:
            raise _refused("redelivery_delay", "redelivery_delay must be 0 or more")
        if self.trace_context is not None and not callable(self.trace_context):
            raise _refused("trace_context", "trace_context must be a function returning a traceparent")

    @property
    def server_list(self) -> list[str]:
        raw = self.servers.split(",") if isinstance(self.servers, str) else list(self.servers)
        found = [s.strip() for s in raw if s.strip()]
        if not found:
            raise _refused("servers", "no NATS server given")
        return found

    @property
    def effective_inbox_prefix(self) -> str:
        return self.inbox_prefix or subjects.inbox_prefix(self.runner_id)

    def signing_key(self) -> tuple[str, bytes]:
        """The key id and key that sign command results."""
        if self.signing_key_id is not None:
            return self.signing_key_id, self.signing_keys[self.signing_key_id]
        if len(self.signing_keys) == 1:
            key_id, key = next(iter(self.signing_keys.items()))
            return key_id, key
        if not self.signing_keys:
            raise _refused("signing_keys", "no signing key: set signing_keys")
        raise _refused("signing_key_id", "several signing keys: set signing_key_id")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of the connection, or None for plain `nats://`."""
        if self.tls_context is not None:
            return self.tls_context
        wanted = self.tls_ca is not None or self.tls_cert is not None
        if not wanted and not any(s.startswith("tls://") for s in self.server_list):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.tls_cert is not None and self.tls_key is not None:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context

    def nats_options(self) -> dict[str, Any]:
        """Keyword arguments of `nats.connect` for the identity, credentials and TLS."""
        options: dict[str, Any] = {
            "servers": self.server_list,
            "name": self.name or f"continuity-runner-{self.runner_id}",
            "inbox_prefix": self.effective_inbox_prefix,
        }
        # One attempt's share of `connect_timeout`, so that every server is tried within it
        # (`connect` bounds the whole).
        options["connect_timeout"] = self.connect_timeout / len(options["servers"])
        if self.nkey_seed is not None:
            options["nkeys_seed_str"] = self.nkey_seed
        if self.nkey_seed_file is not None:
            options["nkeys_seed"] = self.nkey_seed_file
        if self.creds_file is not None:
            options["user_credentials"] = self.creds_file
        if self.user is not None:
            options["user"] = self.user
        if self.password is not None:
            options["password"] = self.password
        if self.token is not None:
            options["token"] = self.token
        tls = self.ssl_context()
        if tls is not None:
            options["tls"] = tls
            options["tls_handshake_first"] = self.tls_handshake_first
        return options


def _refused(option: str, why: str) -> InvalidRequest:
    """An option `connect` cannot use: named, its value never repeated (it may be a secret)."""
    return InvalidRequest(why if why.startswith(option) else f"{option}: {why}", field=option)
