"""The session slot: one agent in one conversation owns one saved native session."""

from __future__ import annotations

import msgspec

from shared.contracts.types import Token


class SessionRef(msgspec.Struct, frozen=True):
    """`{"tenant", "conversation_id", "agent_id"}` (contract section 1)."""

    tenant: Token
    conversation_id: Token
    agent_id: Token

    @property
    def key(self) -> str:
        """`<tenant>/<conversation_id>/<agent_id>`, the hash tag of every key of this session."""
        return f"{self.tenant}/{self.conversation_id}/{self.agent_id}"
