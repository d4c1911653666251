"""The stored session record (contract 3.1 and 9.6): its fields, its generation binding, and how
it is read, whole (the session-store) or as the few fields a recovery decision reads (the
classifier and the archiver). Its home is shared: the session-store writes it, the archiver reads
its generation to hide it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from shared.contract.sessions import CommitRequest
from shared.contract.times import now_rfc3339

_encode = msgspec.json.Encoder().encode


def text(value: bytes | str | None) -> str:
    """A stored field (or a script's reply) as text; absent is ''."""
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def integer(value: bytes | None) -> int:
    """A stored number; absent or unreadable is 0 (a record written by an older release has no
    epoch or revision: it was never replaced, so 0)."""
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True)
class SavedSession:
    """What a recovery decision reads of the session record: None for both without a record."""

    policy: str | None
    epoch: int | None

    @property
    def read(self) -> tuple[str, int]:
        """The (policy, epoch) a step decided on, as the recording script compares them."""
        return (self.policy or "", self.epoch or 0)


NO_SESSION = SavedSession(policy=None, epoch=None)


SAVED_FIELDS = ("checkpoint_policy", "epoch", "native_session_id")
"""What a decision reads of the session record (HMGET, in this order): its policy and epoch, and
the handle every record has, which tells a record without the other two from no record."""
_SAVED_KEYS = tuple(name.encode() for name in SAVED_FIELDS)


def saved_session(raw: Mapping[bytes, bytes]) -> SavedSession:
    """From HGETALL's reply of the session record."""
    if not raw:
        return NO_SESSION
    get = raw.get
    return saved_session_of([get(key) for key in _SAVED_KEYS])


def saved_session_of(values: Sequence[bytes | None]) -> SavedSession:
    """From HMGET of `SAVED_FIELDS` (a None for every field: no record)."""
    policy, epoch, handle = values
    if policy is None and epoch is None and handle is None:
        return NO_SESSION
    return SavedSession(
        policy=policy.decode("utf-8", "replace") if policy is not None else None,
        epoch=integer(epoch),
    )


V1_FIELDS = (
    "native_session_id",
    "adapter",
    "model",
    "cwd",
    "cursor",
    "prompt_hash",
    "checkpoint_policy",
    "updated_at",
)
"""Version-1 fields, in binding order: what every release, old or new, writes (contract 3.1)."""

# Every stored value is text: version-1 values are the runner's strings, the version-2 values
# are numbers, states and the text `generation` below.


def generation_binding(v1: Mapping[str, str]) -> str:
    """Lowercase hex SHA-256 of the version-1 values in order, joined by newlines (3.1)."""
    return _binding_digest(v1).hex()


def binding_stamp(v1: Mapping[str, str]) -> bytes:
    """What a commit stores of the binding: its first STAMP_CHARS lowercase hex characters (ASCII
    text, ready to be a script argument)."""
    return _text_stamp(_binding_digest(v1))


def _text_stamp(digest: bytes) -> bytes:
    return digest[: STAMP_CHARS // 2].hex().encode()


def _binding_digest(v1: Mapping[str, str]) -> bytes:
    joined = "\n".join([v1.get(name, "") for name in V1_FIELDS])
    return hashlib.sha256(joined.encode("utf-8")).digest()


STAMP_CHARS = 16
"""The compact `generation` field is the first 16 hex characters of the binding (64 bits)
followed by the generation: text, like every stored value, so that a client decoding replies as
UTF-8 reads the whole record; 64 bits detect an accidental rewrite of the version-1 fields (the
binding guards against that, not against forgery); and the record stays small enough for Redis'
listpack encoding (docs/contract-v1.md, 9.6)."""

_RAW_STAMP_BYTES = 16
"""The earlier compact form: the binding's first 16 bytes, raw. Still read, never written."""

READ_FIELDS = (
    *V1_FIELDS,
    "revision",
    "epoch",
    "state",
    "generation",
    "compatibility_generation",
    "generation_binding",
    "owner",
)
"""Every field a reader of the record uses, in the order `StoredSession.from_values` takes them
(HMGET): the version-1 fields, then the version-2 ones, then the contract's long form, then the
owner (contract section 10)."""
_READ_KEYS = tuple(name.encode() for name in READ_FIELDS)
_V1_COUNT = len(V1_FIELDS)


class StoredSession(msgspec.Struct, frozen=True, kw_only=True):
    """Read once per decision: a frozen Struct is built in C, about a fifth of the time a frozen
    dataclass takes."""

    v1: Mapping[str, str]
    revision: int
    epoch: int
    state: str
    generation: str
    generation_trusted: bool
    owner: str = ""
    """The runner_id that owns the session; '' for none yet (a record of an older release, or
    one only the services have written)."""

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes]) -> StoredSession:
        """From HGETALL's reply (`Redis.hgetall`)."""
        get = raw.get
        return cls.from_values([get(key) for key in _READ_KEYS])

    @classmethod
    def from_values(cls, values: Sequence[bytes | None]) -> StoredSession:
        """From HMGET of `READ_FIELDS`, in that order (None for a field the record lacks). This
        runs once per decision: kept lean."""
        raw_v1 = [value or b"" for value in values[:_V1_COUNT]]
        v1 = dict(zip(V1_FIELDS, [value.decode("utf-8", "replace") for value in raw_v1], strict=True))
        # The binding over the stored bytes: what a commit hashed, as it wrote them.
        digest = hashlib.sha256(b"\n".join(raw_v1)).digest()
        revision, epoch, state, compact, long_generation, long_binding, owner = values[_V1_COUNT:]
        generation, trusted = _generation(compact, long_generation, long_binding, digest)
        return cls(
            v1=v1,
            revision=integer(revision),
            epoch=integer(epoch),
            # No state is active: commits leave the default out, and older releases never wrote one.
            state=text(state) or "active",
            generation=generation,
            generation_trusted=trusted,
            owner=text(owner),
        )

    @property
    def handle(self) -> str:
        return self.v1["native_session_id"]

    @property
    def has_generation(self) -> bool:
        return bool(self.generation)


def _generation(
    compact: bytes | None, long_generation: bytes | None, long_binding: bytes | None, digest: bytes
) -> tuple[str, bool]:
    """The stored generation, and whether the binding recomputed from the current version-1
    fields (`digest`) still equals the one stamped with it."""
    # Both compact forms have a 16-byte stamp: 16 hex characters (written now) or 16 raw bytes
    # (written by the previous release). A stamp of one form matching the other is a 2^-64 chance.
    if compact is not None and len(compact) > STAMP_CHARS:
        stamp, generation = compact[:STAMP_CHARS], text(compact[STAMP_CHARS:])
        return generation, stamp == _text_stamp(digest) or stamp == digest[:_RAW_STAMP_BYTES]
    # The long form of the contract's text (compatibility_generation, generation_binding).
    generation = text(long_generation)
    return generation, bool(generation) and text(long_binding) == digest.hex()


def commit_args(req: CommitRequest, runner_id: str | None, archive_ms: int) -> list[Any]:
    """ARGV of `session_commit.lua` for `req`, by `runner_id` (None: the services' own account),
    with the archive retention of a held record's copy."""
    v1 = {
        "native_session_id": req.native_session_id,
        "adapter": req.adapter,
        "model": req.model,
        "cwd": req.cwd,
        "cursor": req.cursor or "",
        "prompt_hash": req.prompt_hash or "",
        "checkpoint_policy": req.checkpoint_policy,
        "updated_at": now_rfc3339(),
    }
    generation = req.compatibility_generation or ""
    return [
        *(v1[name] for name in V1_FIELDS),
        generation,
        binding_stamp(v1) if generation else b"",
        "" if req.expected_revision is None else req.expected_revision,
        "" if req.epoch is None else req.epoch,
        archive_ms,
        runner_id or "",
        _binding_entry(runner_id) if runner_id else "",
    ]


def _binding_entry(runner_id: str) -> bytes:
    """The ownership entry of a first commit, without its epoch and closing brace: the script
    adds the record's epoch, which a binding does not change."""
    entry = {
        "at": now_rfc3339(),
        "kind": "bound",
        "actor": runner_id,
        "previous_owner": None,
        "owner": runner_id,
    }
    return _encode(entry)[:-1]
