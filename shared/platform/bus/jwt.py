"""NATS JWTs (version 2): keys, claims signed with an NKEY (`ed25519-nkey`), and the creds file a
user connects with.

The claims are plain JSON objects in the layout the server reads (nats-io/jwt v2: operator,
account and user claims under `nats`); `encode` signs them and `decode` checks a signature.
Limits left out of an account's claims would read as zero (no connection, no subscription), so
the builders in `layout` always write them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nacl.exceptions
import nacl.signing
import nkeys

NO_LIMIT = -1
HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}

_PREFIXES = {
    "operator": nkeys.PREFIX_BYTE_OPERATOR,
    "account": nkeys.PREFIX_BYTE_ACCOUNT,
    "user": nkeys.PREFIX_BYTE_USER,
}


class JWTError(ValueError):
    """A JWT that is not well formed, or whose signature does not hold."""


@dataclass(frozen=True)
class Key:
    """An NKEY pair: `seed` signs, `public` names (an operator `O...`, account `A...` or user
    `U...`)."""

    seed: bytes
    public: str

    @classmethod
    def new(cls, kind: str) -> Key:
        seed = bytes(nkeys.encode_seed(os.urandom(32), _PREFIXES[kind]))
        return cls.from_seed(seed)

    @classmethod
    def from_seed(cls, seed: bytes) -> Key:
        try:
            public = nkeys.from_seed(bytearray(seed.strip())).public_key.decode()
        except (nkeys.NkeysError, ValueError) as exc:
            raise JWTError("not an NKEY seed") from exc
        return cls(seed.strip(), public)

    def sign(self, data: bytes) -> bytes:
        return bytes(nkeys.from_seed(bytearray(self.seed)).sign(data))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def encode(claims: dict[str, Any], signer: Key, *, now: float | None = None) -> str:
    """Sign `claims` (`sub`, `name` and `nats` set by the caller) as `signer`: sets `iss`, `iat`
    and a `jti` derived from the rest, so that two different claims never share an id (the
    resolver ignores a JWT whose id it already holds)."""
    body = {**claims, "iss": signer.public, "iat": int(time.time() if now is None else now)}
    body.pop("jti", None)
    digest = hashlib.sha256(_dumps(body) + os.urandom(8)).digest()
    body["jti"] = base64.b32encode(digest).decode().rstrip("=")
    signed = f"{_b64(_dumps(HEADER))}.{_b64(_dumps(body))}"
    return f"{signed}.{_b64(signer.sign(signed.encode()))}"


def decode(token: str) -> dict[str, Any]:
    """The claims of `token`, once its signature is checked against its `iss`."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise JWTError("a JWT has three parts")
    try:
        header = json.loads(_unb64(parts[0]))
        claims = json.loads(_unb64(parts[1]))
        signature = _unb64(parts[2])
    except (ValueError, json.JSONDecodeError) as exc:
        raise JWTError("a JWT part is not base64url JSON") from exc
    if header != HEADER or not isinstance(claims, dict) or not isinstance(claims.get("iss"), str):
        raise JWTError("not a NATS v2 JWT")
    try:
        _verify_key(claims["iss"]).verify(f"{parts[0]}.{parts[1]}".encode(), signature)
    except (nacl.exceptions.BadSignatureError, ValueError) as exc:
        raise JWTError("the JWT's signature does not hold") from exc
    return claims


def _verify_key(public: str) -> nacl.signing.VerifyKey:
    """An NKEY public key (base32: a prefix byte, 32 key bytes, a CRC-16) as a verifying key."""
    raw = base64.b32decode(public + "=" * (-len(public) % 8))
    if len(raw) != 35 or nkeys.crc16_checksum(raw[:33]) != raw[33:]:
        raise ValueError("not an NKEY public key")
    return nacl.signing.VerifyKey(raw[1:33])


CREDS_TEMPLATE = """\
-----BEGIN NATS USER JWT-----
{jwt}
------END NATS USER JWT------

************************* IMPORTANT *************************
NKEY Seed printed below can be used to sign and prove identity.
NKEYs are sensitive and should be treated as secrets.

-----BEGIN USER NKEY SEED-----
{seed}
------END USER NKEY SEED------

*************************************************************
"""


def creds(user_jwt: str, seed: bytes) -> str:
    """The text of a creds file (nats-py `user_credentials`, nats.go `nats.UserCredentials`)."""
    return CREDS_TEMPLATE.format(jwt=user_jwt, seed=seed.decode())


def write_secret(path: Path, text: str | bytes) -> None:
    """Create `path` readable by its owner only; never overwrite an existing file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)
