"""The one reader of the session record's hash fields (`keys.session`) that decisions use, and
the two conversions of a stored field every hash reader shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def fields(raw: Mapping[bytes, bytes] | list[bytes]) -> Mapping[bytes, bytes]:
    """HGETALL's reply as a mapping: redis-py gives one, a raw-reply (pipelined) connection the
    flat RESP list of names and values."""
    if isinstance(raw, list):
        return dict(zip(raw[::2], raw[1::2], strict=True))
    return raw


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


def saved_session(raw: Mapping[bytes, bytes] | list[bytes]) -> SavedSession:
    """From HGETALL's reply of the session record."""
    if not raw:
        return NO_SESSION
    get = fields(raw).get
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
