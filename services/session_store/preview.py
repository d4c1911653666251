"""A rollout's preview: what the next turn of every saved session of an adapter decides once its
runners report a new generation (`continuity.sessions.preview`).

Each record is decided as its next turn would be: the same model, cwd and cursor as stored,
`profile-ready` with the new generation, by the running policy and the declarations. A turn that
changes model, cwd or cursor decides fresh for that reason whatever the generation, so these
counts are for the turns that would otherwise resume.

A preview may give the new release's components instead of (or with) a generation: a generation
made of components holds the session's own `cwd`, so one generation cannot stand for every
session. With components alone, each session's next generation is its stored one with the given
components changed: it differs when one of them differs from the stored one, and the declarations
of those components may cover it. A session saved without components then counts as changed
(fresh), and one without a trusted generation as missing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

import msgspec

from shared.contract.components import COMPONENT_NAMES
from shared.contract.policy import PreviewReply, PreviewRequest, TenantPreview
from shared.contract.sessions import DecideRequest, SessionRef
from shared.contract.types import ComponentName, GenerationCheck
from shared.platform.redis import Redis
from shared.policy import Policy
from shared.records import keys
from shared.records.compatibility import Declarations, component_declaration_id, declaration_id
from shared.records.session import PRINT_CHARS, READ_FIELDS, StoredSession, changed_by_prints, fingerprint

from . import step

BATCH = 500
"""Records read per pipelined batch."""

_PREFIX = "continuity:session:{"


def session_key_of(key: bytes) -> str | None:
    """The session key of a session record's Redis key; None for any other key."""
    text = key.decode("utf-8", "replace")
    if not (text.startswith(_PREFIX) and text.endswith("}")):
        return None
    return text[len(_PREFIX) : -1]


def next_turn(sk: str, stored: StoredSession, generation: str | None) -> DecideRequest:
    """The decide request of the session's next turn under the new generation."""
    tenant, conversation_id, agent_id = sk.split("/", 2)
    v1 = stored.v1
    return DecideRequest(
        session=SessionRef(tenant=tenant, conversation_id=conversation_id, agent_id=agent_id),
        adapter=v1["adapter"],
        model=v1["model"],
        cwd=v1["cwd"],
        latest_cursor=v1["cursor"] or None,
        compatibility="profile-ready",
        ready_generation=generation,
    )


def with_components(prints: str, given: Mapping[ComponentName, str]) -> str:
    """Stored fingerprints with the given components' in their place."""
    return "".join(
        fingerprint(given[name]) if name in given else prints[i * PRINT_CHARS : (i + 1) * PRINT_CHARS]
        for i, name in enumerate(COMPONENT_NAMES)
    )


def compared(
    stored: StoredSession, turn: DecideRequest, req: PreviewRequest
) -> tuple[GenerationCheck, list[ComponentName] | None]:
    """How the next turn's generation compares with the stored one, and the components that
    differ (None when not known)."""
    if req.components is None:
        return step.generation_check(stored, turn), None
    if req.generation is not None:
        generation = step.generation_check(stored, turn)
        ready = turn
    else:
        # Components alone: the stored generation with the given components changed.
        if not stored.generation_trusted:
            return "missing", None
        prints = stored.prints
        if prints is None:
            return "changed", None
        changed = changed_by_prints(prints, with_components(prints, req.components))
        return ("changed" if changed else "matched"), changed or None
    if generation != "changed":
        return generation, None
    ready = DecideRequest(**{**msgspec.structs.asdict(turn), "ready_components": req.components})
    return generation, step.changed_components(stored, ready)


async def preview(
    redis: Redis, declarations: Declarations, policy: Policy, req: PreviewRequest
) -> PreviewReply:
    declared = await declarations.ids()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    changes: dict[str, Counter[str]] = defaultdict(Counter)
    used: set[str] = set()
    scanned = 0
    batch: list[str] = []

    async def flush() -> None:
        nonlocal scanned
        replies = await redis.batch([("HMGET", keys.session(sk), *READ_FIELDS) for sk in batch])
        for sk, values in zip(batch, replies, strict=True):
            if not any(v is not None for v in values):
                continue  # expired between the scan and the read
            stored = StoredSession.from_values(values)
            if stored.v1["adapter"] != req.adapter:
                continue
            scanned += 1
            turn = next_turn(sk, stored, req.generation)
            generation, changed = compared(stored, turn, req)
            if generation == "changed":
                generation, covering = covered(req, stored, changed, declared)
                used.update(covering)
            reply = step.decide(stored, turn, policy, generation)
            counts[turn.session.tenant][reply.reason or "resume"] += 1
            if changed and generation in ("changed", "declared"):
                changes[turn.session.tenant].update(changed)
        batch.clear()

    # A tenant is a TOKEN (contract 1): no glob character can be in it.
    pattern = _PREFIX + (f"{req.tenant}/*" if req.tenant else "*")
    async for key in redis.scan(pattern):
        sk = session_key_of(key)
        if sk is None or sk.count("/") < 2:
            continue
        batch.append(sk)
        if len(batch) >= BATCH:
            await flush()
    if batch:
        await flush()
    return preview_reply(req, policy, scanned, counts, changes, used)


def covered(
    req: PreviewRequest, stored: StoredSession, changed: list[ComponentName] | None, declared: frozenset[str]
) -> tuple[GenerationCheck, list[str]]:
    """A changed generation, `declared` when a declaration of the pair or of every changed
    component covers it; and the declarations that do."""
    pair = (
        declaration_id(req.adapter, stored.generation, req.generation) if req.generation is not None else None
    )
    covering = [component_declaration_id(req.adapter, name) for name in changed or ()]
    if pair in declared:
        return "declared", [pair]
    if covering and all(found in declared for found in covering):
        return "declared", covering
    return "changed", []


def preview_reply(
    req: PreviewRequest,
    policy: Policy,
    scanned: int,
    counts: dict[str, Counter[str]],
    changes: dict[str, Counter[str]],
    used: set[str],
) -> PreviewReply:
    """The counts by tenant, and their sums."""
    tenants = [
        TenantPreview(
            tenant=tenant,
            resume=c["resume"],
            fresh=sum(c.values()) - c["resume"],
            reasons={reason: n for reason, n in sorted(c.items()) if reason != "resume"},
            changed_components=dict(sorted(changes[tenant].items())),
        )
        for tenant, c in sorted(counts.items())
    ]
    return PreviewReply(
        adapter=req.adapter,
        policy=policy.version,
        scanned=scanned,
        resume=sum(t.resume for t in tenants),
        fresh=sum(t.fresh for t in tenants),
        by_tenant=tenants,
        declarations=sorted(used),
    )
