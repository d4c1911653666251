"""TLS for the connections to NATS and Redis: the one place that builds `ssl.SSLContext`
objects from the configuration. Connections only take a context.

A `tls://` NATS URL or a `rediss://` Redis URL turns TLS on; `CONTINUITY_NATS_TLS_*` and
`CONTINUITY_REDIS_TLS_*` name the CA that signs the servers' certificates (the system's trust
store when unset) and, for servers that require mutual TLS, the client certificate and key.
Verification is always on: the server's certificate must chain to that CA and name the host
connected to, or `<prefix>_SERVER_NAME` when set (a port-forward dials 127.0.0.1, the
certificate names the service). There is no switch that turns it off.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from socket import socket
from typing import Protocol

from shared.platform.environment import (
    NATS_TLS_PREFIX,
    REDIS_TLS_PREFIX,
    ConfigError,
    nats_url_uses_tls,
    redis_url_uses_tls,
    tls_files,
    tls_server_name,
)


class Settings(Protocol):
    """The TLS fields of `shared.platform.config.Config`, which loads its contexts once at start
    (and so is not imported here)."""

    @property
    def nats_url(self) -> str: ...
    @property
    def nats_tls_ca(self) -> str: ...
    @property
    def nats_tls_cert(self) -> str: ...
    @property
    def nats_tls_key(self) -> str: ...
    @property
    def nats_tls_server_name(self) -> str: ...
    @property
    def redis_url(self) -> str: ...
    @property
    def redis_tls_ca(self) -> str: ...
    @property
    def redis_tls_cert(self) -> str: ...
    @property
    def redis_tls_key(self) -> str: ...
    @property
    def redis_tls_server_name(self) -> str: ...


def client_context(ca: str, cert: str, key: str, *, prefix: str, server_name: str = "") -> ssl.SSLContext:
    """A client context that verifies the server against `ca` (a PEM file; the system's trust
    store when empty) and presents `cert` / `key` when given. With `server_name`, every server's
    certificate must name it, whatever host was dialled. Errors name the variables."""
    try:
        context = _new_context(ca, server_name)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{prefix}_CA: cannot load CA certificates from {ca} ({_reason(exc)})") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert:
        try:
            # An encrypted key would make OpenSSL prompt on the terminal: refuse it instead.
            context.load_cert_chain(cert, key, password=_no_password)
        except (OSError, ssl.SSLError, _EncryptedKey) as exc:
            raise ConfigError(
                f"{prefix}_CERT / {prefix}_KEY: cannot load the client certificate {cert} "
                f"with key {key} ({_reason(exc)})"
            ) from None
    return context


def nats_context(config: Settings) -> ssl.SSLContext | None:
    """The context of the services' NATS connections, or None with plain `nats://` URLs."""
    if not nats_url_uses_tls(config.nats_url):
        return None
    return client_context(
        config.nats_tls_ca,
        config.nats_tls_cert,
        config.nats_tls_key,
        prefix=NATS_TLS_PREFIX,
        server_name=config.nats_tls_server_name,
    )


def redis_context(config: Settings) -> ssl.SSLContext | None:
    """The context of the services' Redis connections, or None with plain `redis://` URLs."""
    if not redis_url_uses_tls(config.redis_url):
        return None
    return client_context(
        config.redis_tls_ca,
        config.redis_tls_cert,
        config.redis_tls_key,
        prefix=REDIS_TLS_PREFIX,
        server_name=config.redis_tls_server_name,
    )


def nats_context_from_env(url: str, env: Mapping[str, str] | None = None) -> ssl.SSLContext | None:
    """The NATS context of a client command, whose URL may come from `--nats-url`; the
    `CONTINUITY_NATS_TLS_*` variables are read and checked as the services read them."""
    env = os.environ if env is None else env
    enabled = nats_url_uses_tls(url)
    ca, cert, key = tls_files(env, NATS_TLS_PREFIX, enabled=enabled, url_variable="NATS_URL")
    name = tls_server_name(env, NATS_TLS_PREFIX, enabled=enabled, url_variable="NATS_URL")
    return client_context(ca, cert, key, prefix=NATS_TLS_PREFIX, server_name=name) if enabled else None


class _ServerNameContext(ssl.SSLContext):
    """A client context whose every connection checks the certificate against `server_name`
    (and sends it as SNI) instead of the host the caller dialled. The connections of nats-py,
    redis-py and the pipelined client only take a context, so the name travels in it."""

    server_name = ""

    def wrap_socket(
        self,
        sock: socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return super().wrap_socket(
            sock, server_side, do_handshake_on_connect, suppress_ragged_eofs, self.server_name, session
        )

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        # asyncio's and uvloop's TLS transports both call this with the dialled host.
        return super().wrap_bio(incoming, outgoing, server_side, self.server_name, session)


def _new_context(ca: str, server_name: str) -> ssl.SSLContext:
    if not server_name:
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca or None)
    # PROTOCOL_TLS_CLIENT verifies the chain and the name, as the default context does.
    context = _ServerNameContext(ssl.PROTOCOL_TLS_CLIENT)
    context.server_name = server_name
    if ca:
        context.load_verify_locations(cafile=ca)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return context


class _EncryptedKey(Exception):
    pass


def _no_password() -> str:
    raise _EncryptedKey("the key is encrypted; give an unencrypted key file")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) if isinstance(exc, _EncryptedKey) else type(exc).__name__
