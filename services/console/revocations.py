"""Signed-out sessions, shared by every console replica: a JetStream key-value bucket whose keys
are the ids of sessions signed out, each kept as long as a session cookie can be valid.

A cookie is signed, so a copy of it stays valid until it expires; signing out puts its session
id here, and every replica refuses a signed-in cookie whose id is here. The bucket exists only
with the development login: an authenticating proxy names its operator on every request and
ends its own sessions."""

from __future__ import annotations

import re

from nats.js import JetStreamContext
from nats.js.api import StorageType
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from nats.js.kv import KeyValue

from shared.platform.logs import Log

log = Log("continuity.console")

BUCKET = "continuity_console_revoked"
BUCKET_MAX_BYTES = 16 * 1024 * 1024
"""What the bucket may hold: each signed-out session is a key without a value, for one session
lifetime; full, a sign-out fails rather than an older one being forgotten."""
_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")  # a session id (`secrets.token_urlsafe`)


class Revocations:
    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    @classmethod
    async def open(cls, js: JetStreamContext, ttl_s: int, replicas: int) -> Revocations:
        """The bucket, created when missing with entries kept `ttl_s` (the session lifetime). An
        existing bucket is used as it is, like the streams; one keeping entries for less than a
        session lasts is reported, since a revoked cookie would be accepted again."""
        try:
            kv = await cls._bucket(js, ttl_s, replicas)
        except Exception as exc:
            # Without it a copied cookie would outlive signing out: the development login stops.
            log.error("console_revocations_unavailable", bucket=BUCKET, error_type=type(exc).__name__)
            raise
        return cls(kv)

    @staticmethod
    async def _bucket(js: JetStreamContext, ttl_s: int, replicas: int) -> KeyValue:
        try:
            kv = await js.key_value(BUCKET)
        except BucketNotFoundError:
            # Replicas starting together create the same configuration: JetStream accepts both.
            return await js.create_key_value(
                bucket=BUCKET,
                ttl=float(ttl_s),
                history=1,
                replicas=replicas,
                storage=StorageType.FILE,
                max_bytes=BUCKET_MAX_BYTES,  # the shipped authorization refuses a stream without one
            )
        kept = (await js.stream_info(f"KV_{BUCKET}")).config.max_age
        if kept and kept < ttl_s:
            log.warning("console_revocations_kept_shorter_than_sessions", kept_s=kept, session_ttl_s=ttl_s)
        return kv

    async def revoke(self, sid: str) -> None:
        if _KEY.match(sid):
            await self._kv.put(sid, b"")

    async def revoked(self, sid: str) -> bool:
        """Whether `sid` was signed out. NATS errors propagate: the caller refuses the request
        rather than accept a session it could not check."""
        if not _KEY.match(sid):
            return True
        try:
            await self._kv.get(sid)
        except KeyNotFoundError:
            return False
        return True
