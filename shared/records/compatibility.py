"""Compatibility declarations: an operator's word that an adapter's sessions saved under one
generation resume under a newer one, or that a change of one component of its generation
resumes (docs/contract-v1.md 9.11).

A declaration is keyed by an id derived from the adapter and both generations' digests, or from
the adapter and the component's name; the generations themselves are never stored, so a record,
a reply or a log holds no value. `decide` reads one HMGET, and only when the generations differ:
the pair's id and the ids of the components that changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from shared.contract.policy import Declaration, DeclarationAudit
from shared.contract.times import now_rfc3339
from shared.contract.types import ComponentName
from shared.platform.redis import Redis
from shared.records import keys
from shared.records.store import COMPATIBILITY_AUDIT_KEPT, RunStore

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Declaration).decode
_decode_audit = msgspec.json.Decoder(DeclarationAudit).decode


def declaration_id(adapter: str, saved_generation: str, ready_generation: str) -> str:
    """`compat-` and 16 hex digits of the digest of the three, each length-prefixed."""
    digest = hashlib.sha256()
    for part in (adapter, saved_generation, ready_generation):
        data = part.encode()
        digest.update(len(data).to_bytes(4, "big") + data)
    return "compat-" + digest.hexdigest()[:16]


COMPONENT_MARK = "*"
"""Where a pair's saved generation would be: no generation (a TOKEN) is `*`, so the id of a
component's declaration is never a pair's."""


def component_declaration_id(adapter: str, component: str) -> str:
    """The id of the declaration of `component` for `adapter`."""
    return declaration_id(adapter, COMPONENT_MARK, component)


class Declared(NamedTuple):
    """What the declarations say of a changed generation: `pair`, the declaration of the pair
    of generations; or `components`, the declarations of every changed component (empty when
    one of them is not declared)."""

    pair: str | None
    components: tuple[str, ...]

    @property
    def resumes(self) -> bool:
        return self.pair is not None or bool(self.components)


NOT_DECLARED = Declared(None, ())


class Declarations:
    def __init__(self, redis: Redis, runs: RunStore) -> None:
        self._redis = redis
        self._runs = runs

    async def declare(
        self,
        adapter: str,
        saved: str | None,
        ready: str | None,
        actor: str,
        note: str | None,
        component: ComponentName | None = None,
    ) -> tuple[str, Declaration]:
        """`ok` and the new declaration, or `unchanged` and the one declared before: of the pair
        (`saved`, `ready`), or with `component` (and neither generation), of that component."""
        if component is not None:
            made = component_declaration_id(adapter, component)
        else:
            assert saved is not None and ready is not None
            made = declaration_id(adapter, saved, ready)
        found = Declaration(
            id=made,
            adapter=adapter,
            declared_by=actor,
            declared_at=now_rfc3339(),
            note=note,
            component=component,
        )
        code = await self._runs.compatibility_change(
            "declare", found.id, _encode(found), self._audit("declared", found)
        )
        if code == "unchanged":
            raw = await self._redis.hget(keys.compatibility_declarations(), found.id)
            if raw is not None:
                found = _decode(raw)
        return code, found

    async def revoke(self, declaration_id: str, actor: str) -> Declaration | None:
        """The revoked declaration, None when there was none."""
        raw = await self._redis.hget(keys.compatibility_declarations(), declaration_id)
        if raw is None:
            return None
        found = _decode(raw)
        entry = DeclarationAudit(
            at=now_rfc3339(),
            kind="revoked",
            actor=actor,
            id=found.id,
            adapter=found.adapter,
            component=found.component,
        )
        code = await self._runs.compatibility_change("revoke", declaration_id, b"", _encode(entry))
        return found if code == "ok" else None

    async def declared(
        self, adapter: str, saved: str, ready: str, changed: Sequence[str] | None = None
    ) -> Declared:
        """Whether `ready` resumes sessions saved under `saved`: by the pair's declaration, or,
        when `changed` names the components that differ, by the declarations of every one of
        them. One HMGET."""
        pair = declaration_id(adapter, saved, ready)
        ids = [component_declaration_id(adapter, name) for name in changed or ()]
        hits = await self._redis.execute("HMGET", keys.compatibility_declarations(), pair, *ids)
        if hits[0] is not None:
            return Declared(pair, ())
        if ids and all(hit is not None for hit in hits[1:]):
            return Declared(None, tuple(ids))
        return NOT_DECLARED

    async def all(self) -> list[Declaration]:
        raw = await self._redis.hgetall(keys.compatibility_declarations())
        return sorted((_decode(v) for v in raw.values()), key=lambda d: (d.adapter, d.declared_at, d.id))

    async def ids(self) -> frozenset[str]:
        raw = await self._redis.hgetall(keys.compatibility_declarations())
        return frozenset(k.decode() for k in raw)

    async def audit(self) -> list[DeclarationAudit]:
        raw = await self._redis.lrange(keys.compatibility_audit(), 0, COMPATIBILITY_AUDIT_KEPT - 1)
        return [_decode_audit(item) for item in raw]

    @staticmethod
    def _audit(kind: str, declaration: Declaration) -> bytes:
        return _encode(
            DeclarationAudit(
                at=declaration.declared_at,
                kind=kind,
                actor=declaration.declared_by,
                id=declaration.id,
                adapter=declaration.adapter,
                component=declaration.component,
            )
        )
