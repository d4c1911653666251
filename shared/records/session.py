"""The stored session record (contract 3.1 and 9.6): its fields, its generation binding, and how
it is read, whole (the session-store) or as the few fields a recovery decision reads (the
classifier and the archiver). Its home is shared: the session-store writes it, the archiver reads
its generation to hide it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from shared.contract.components import COMPONENT_NAMES
from shared.contract.sessions import CommitRequest
from shared.contract.times import now_rfc3339
from shared.contract.types import ComponentName

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
    """What a commit stores of the binding: its first 64 bits as STAMP_CHARS base64url
    characters (ASCII text, ready to be a script argument)."""
    return _stamp(_binding_digest(v1))


def _stamp(digest: bytes) -> bytes:
    # binascii and a translation table: this runs once per decision, and is cheaper than
    # base64.urlsafe_b64encode.
    return binascii.b2a_base64(digest[:8], newline=False)[:STAMP_CHARS].translate(_URLSAFE)


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _hex_stamp(digest: bytes) -> bytes:
    return digest[: _HEX_STAMP_CHARS // 2].hex().encode()


def _binding_digest(v1: Mapping[str, str]) -> bytes:
    joined = "\n".join([v1.get(name, "") for name in V1_FIELDS])
    return hashlib.sha256(joined.encode("utf-8")).digest()


GENERATION_FIELD = "g"
"""The field a commit stores the generation in: the binding stamp followed by the generation
(docs/contract-v1.md, 9.6). A one-letter name, and a stamp in base64url, keep a realistic record
with its owner within 512 bytes of Redis memory."""

STAMP_CHARS = 11
"""The binding stamp of `GENERATION_FIELD`: the first 64 bits of the binding as base64url text
(no padding), like every stored value text, so that a client decoding replies as UTF-8 reads the
whole record; 64 bits detect an accidental rewrite of the version-1 fields (the binding guards
against that, not against forgery); and the field stays short enough for Redis' listpack
encoding."""

_HEX_STAMP_CHARS = 16
"""The previous form, in the `generation` field: the binding's first 16 lowercase hex
characters. Still read, never written."""

_RAW_STAMP_BYTES = 16
"""The form before it, in the `generation` field too: the binding's first 16 bytes, raw."""

_HEX_GENERATION = re.compile(r"^[0-9a-f]{64}\Z")
_PACKED = "~"
"""The mark of a generation of 64 hex digits stored packed (a TOKEN never holds `~`)."""


def stored_generation(generation: str) -> str:
    """What the `generation` field holds after the stamp: a generation of 64 lowercase hex
    digits (one made of components) packed as `~` and the 43 base64url characters of its 32
    bytes, so that stamp and generation stay within the 64 bytes of a compact hash value
    (9.6); any other generation as it is."""
    if _HEX_GENERATION.match(generation):
        return _PACKED + base64.urlsafe_b64encode(bytes.fromhex(generation)).decode()[:43]
    return generation


_PACKED_FORM = re.compile(r"^~[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]\Z")
"""`~` and the base64url of 32 bytes: the last character carries 4 bits, its 2 low bits zero."""


def _unpacked(generation: str) -> str:
    if len(generation) == 44 and _PACKED_FORM.match(generation):
        return base64.urlsafe_b64decode(generation[1:] + "=").hex()
    return generation


# The `components` field (9.6): the first TAG_CHARS characters of the binding stamp it was
# committed with (so a generation rewritten by a release that knows no components leaves them
# untrusted), three hex digits of the mask of the components that changed at the commit that
# last changed the generation (0: not known), then per component, in name order, the first 36
# bits of its digest as 6 base64url characters, or ABSENT. 64 characters in all.
TAG_CHARS = 7
MASK_CHARS = 3
PRINT_CHARS = 6
ABSENT = "." * PRINT_CHARS
COMPONENTS_CHARS = TAG_CHARS + MASK_CHARS + PRINT_CHARS * len(COMPONENT_NAMES)


def fingerprint(digest: str) -> str:
    """The first 36 bits of a component's hex digest as 6 base64url characters."""
    return base64.urlsafe_b64encode(bytes.fromhex(digest[:12])).decode()[:PRINT_CHARS]


def fingerprints(digests: Mapping[ComponentName, str]) -> str:
    """Every component's fingerprint in name order (ABSENT for a missing one)."""
    return "".join([fingerprint(digests[name]) if name in digests else ABSENT for name in COMPONENT_NAMES])


def changed_by_prints(stored: str, ready: str) -> list[ComponentName]:
    """The names whose fingerprints differ between two `fingerprints` texts."""
    return [
        name
        for i, name in enumerate(COMPONENT_NAMES)
        if stored[i * PRINT_CHARS : (i + 1) * PRINT_CHARS] != ready[i * PRINT_CHARS : (i + 1) * PRINT_CHARS]
    ]


READ_FIELDS = (
    *V1_FIELDS,
    "revision",
    "epoch",
    "state",
    GENERATION_FIELD,
    "generation",
    "compatibility_generation",
    "generation_binding",
    "owner",
    "components",
)
"""Every field a reader of the record uses, in the order `StoredSession.from_values` takes them
(HMGET): the version-1 fields, then the version-2 ones, then the generation's older forms (the
`generation` field of earlier releases, the contract's long form), then the owner (contract
section 10), then the components of the generation (9.6)."""
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
    components: str = ""
    """The `components` field when it belongs to the stored generation (committed with it);
    '' otherwise. Read only when the generations differ, and for a `get`."""

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
        revision, epoch, state, compact, earlier, long_generation, long_binding, owner, components = values[
            _V1_COUNT:
        ]
        generation, trusted, field = _generation(compact, earlier, long_generation, long_binding, digest)
        return cls(
            v1=v1,
            revision=integer(revision),
            epoch=integer(epoch),
            # No state is active: commits leave the default out, and older releases never wrote one.
            state=text(state) or "active",
            generation=generation,
            generation_trusted=trusted,
            owner=text(owner),
            components=_components(components, field),
        )

    @property
    def handle(self) -> str:
        return self.v1["native_session_id"]

    @property
    def has_generation(self) -> bool:
        return bool(self.generation)

    @property
    def prints(self) -> str | None:
        """The stored components' fingerprints (`fingerprints`' form); None without them."""
        return self.components[TAG_CHARS + MASK_CHARS :] if self.components else None

    def component_names(self) -> list[ComponentName] | None:
        """The names of the components stored with the generation; None without them."""
        prints = self.prints
        if prints is None:
            return None
        return [
            name
            for i, name in enumerate(COMPONENT_NAMES)
            if prints[i * PRINT_CHARS : (i + 1) * PRINT_CHARS] != ABSENT
        ]

    def last_changed(self) -> list[ComponentName] | None:
        """The names of the components that changed at the commit that last changed the
        generation; None when not known."""
        if not self.components:
            return None
        try:
            mask = int(self.components[TAG_CHARS : TAG_CHARS + MASK_CHARS], 16)
        except ValueError:
            return None
        return [name for i, name in enumerate(COMPONENT_NAMES) if mask >> i & 1] or None


def _generation(
    compact: bytes | None,
    earlier: bytes | None,
    long_generation: bytes | None,
    long_binding: bytes | None,
    digest: bytes,
) -> tuple[str, bool, bytes | None]:
    """The stored generation, whether the binding recomputed from the current version-1 fields
    (`digest`) still equals the one stamped with it, and the stamped field it was read from (None
    for the long form). The first trusted of `g`, the `generation` field of earlier releases and
    the long form is read; with none trusted, the first present, untrusted."""
    found: tuple[str, bool, bytes | None] | None = None
    if compact is not None and len(compact) > STAMP_CHARS:
        found = (_after_stamp(compact, STAMP_CHARS), compact[:STAMP_CHARS] == _stamp(digest), compact)
        if found[1]:
            return found
    # The `generation` field of earlier releases has a 16-byte stamp: 16 hex characters, or 16
    # raw bytes before that. A stamp of one form matching the other is a 2^-64 chance.
    if earlier is not None and len(earlier) > _HEX_STAMP_CHARS:
        stamp = earlier[:_HEX_STAMP_CHARS]
        trusted = stamp == _hex_stamp(digest) or stamp == digest[:_RAW_STAMP_BYTES]
        if trusted or found is None:
            found = (_after_stamp(earlier, _HEX_STAMP_CHARS), trusted, earlier)
            if trusted:
                return found
    # The long form of the contract's text (compatibility_generation, generation_binding).
    generation = text(long_generation)
    if generation:
        trusted = text(long_binding) == digest.hex()
        if trusted or found is None:
            return generation, trusted, None
    return found or ("", False, None)


def _after_stamp(field: bytes, stamp_chars: int) -> str:
    """The generation a stamped field holds after its stamp, unpacked."""
    return _unpacked(text(field[stamp_chars:]))


def every_generation(raw: Mapping[bytes, bytes]) -> frozenset[str]:
    """Every generation value a session hash (HGETALL's reply) holds, whichever form stores it
    and whether or not it is trusted."""
    values: set[str] = set()
    for field, stamp_chars in ((GENERATION_FIELD.encode(), STAMP_CHARS), (b"generation", _HEX_STAMP_CHARS)):
        value = raw.get(field)
        if value is not None and len(value) > stamp_chars:
            values.add(_after_stamp(value, stamp_chars))
    long_form = raw.get(b"compatibility_generation")
    if long_form is not None:
        values.add(text(long_form))
    return frozenset(value for value in values if value)


def _components(raw: bytes | None, field: bytes | None) -> str:
    """The `components` field if it was committed with the stamped generation `field` (the same
    binding stamp opens both), else ''."""
    if raw is None or field is None or len(raw) != COMPONENTS_CHARS or raw[:TAG_CHARS] != field[:TAG_CHARS]:
        return ""
    return raw.decode("ascii", "replace")


def commit_args(req: CommitRequest, runner_id: str | None, archive_ms: int, token: str = "") -> list[Any]:
    """ARGV of `session_commit.lua` for `req`, by `runner_id` (None: the services' own account),
    with the archive retention of a held record's copy, and the `unconfirmed` token of a commit
    that is to be confirmed held ('' for none)."""
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
    stamp = binding_stamp(v1) if generation else b""
    components = req.compatibility_components if generation else None
    return [
        *(v1[name] for name in V1_FIELDS),
        stored_generation(generation),
        stamp,
        "" if req.expected_revision is None else req.expected_revision,
        "" if req.epoch is None else req.epoch,
        archive_ms,
        runner_id or "",
        _binding_entry(runner_id) if runner_id else "",
        stamp[:TAG_CHARS].decode() + fingerprints(components) if components else "",
        token,
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
