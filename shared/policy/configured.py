"""The policy a service decides by: the shipped one, or the file its configuration names."""

from __future__ import annotations

from typing import Protocol

from .document import from_file
from .policy import SHIPPED, Policy


class HasPolicyFile(Protocol):
    @property
    def policy_file(self) -> str: ...


def configured_policy(config: HasPolicyFile) -> Policy:
    """`PolicyRefused` (naming the invariant) stops the start of a service given a bad file."""
    return from_file(config.policy_file) if config.policy_file else SHIPPED
