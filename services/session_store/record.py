"""The stored session record: its fields, its generation binding, and how it is read."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

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


def generation_binding(v1: Mapping[str, str]) -> str:
    """Lowercase hex SHA-256 of the version-1 values in order, joined by newlines."""
    joined = "\n".join(v1.get(name, "") for name in V1_FIELDS)
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class StoredSession:
    v1: Mapping[str, str]
    revision: int
    epoch: int
    state: str
    generation: str
    binding: str

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes] | list[bytes]) -> StoredSession:
        """From HGETALL's reply: a mapping (redis-py) or the flat RESP list of names and values."""
        pairs = raw.items() if isinstance(raw, Mapping) else zip(raw[::2], raw[1::2], strict=True)
        fields = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in pairs}
        return cls(
            v1={name: fields.get(name, "") for name in V1_FIELDS},
            revision=_int(fields.get("revision")),
            epoch=_int(fields.get("epoch")),
            # A record written by an older release has no state: it was live, so it is active.
            state=fields.get("state") or "active",
            generation=fields.get("compatibility_generation", ""),
            binding=fields.get("generation_binding", ""),
        )

    @property
    def handle(self) -> str:
        return self.v1["native_session_id"]

    @property
    def has_generation(self) -> bool:
        return bool(self.generation)

    @property
    def generation_trusted(self) -> bool:
        """A generation counts only while the version-1 fields are those it was stamped with."""
        return self.has_generation and self.binding == generation_binding(self.v1)


def _int(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0
