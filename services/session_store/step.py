"""The session-store's answers as pure functions of the stored record (no I/O): the resume
decision by a policy's clauses (contract 3.3) with its explanation, and the view of a record
(3.5). Reading and writing the record are `store`'s; who may ask is `requests`'."""

from __future__ import annotations

from shared.contract.sessions import DecideReply, DecideRequest, SessionView
from shared.contract.types import ComponentName, GenerationCheck
from shared.policy import Policy
from shared.policy.resume import FRESH_TRANSCRIPT, RESUME_TRANSCRIPT, ResumeFacts, first_rule
from shared.records.session import StoredSession, changed_by_prints, fingerprints

NO_RECORD = ResumeFacts(record=False)


def generation_check(stored: StoredSession, req: DecideRequest) -> GenerationCheck:
    """How the stored generation and the ready one compare (3.3 rule 3); a declaration is
    looked up only for `changed` (the store's), which then reads `declared`."""
    if req.compatibility != "profile-ready":
        return "not_compared"
    ready = req.ready_generation
    if ready is None or not stored.generation_trusted:
        return "missing"
    return "matched" if ready == stored.generation else "changed"


def changed_components(stored: StoredSession, req: DecideRequest) -> list[ComponentName] | None:
    """The names of the components that differ between the stored generation and the ready
    one, read when the generations differ; None when either side has no components, or when no
    component tells them apart (the fingerprints are 36 bits of each digest: not a name to
    give, nor a change a component's declaration may cover)."""
    prints = stored.prints
    if prints is None or req.ready_components is None:
        return None
    return changed_by_prints(prints, fingerprints(req.ready_components)) or None


def facts_of(stored: StoredSession | None, req: DecideRequest, generation: GenerationCheck) -> ResumeFacts:
    """What the clauses read of a request and its record: comparisons, never values."""
    if stored is None:
        return NO_RECORD
    v1 = stored.v1
    cursor = v1["cursor"]
    differs: list[str] = []
    # A null request value compares as empty, as the stored fields are strings.
    if req.model != v1["model"]:
        differs.append("model")
    if req.cwd != v1["cwd"]:
        differs.append("cwd")
    if (req.latest_cursor or "") != cursor:
        differs.append("latest_cursor")
    empty = [name for name in ("model", "cwd", "cursor") if not v1[name]]
    return ResumeFacts(
        record=True,
        state=stored.state,  # type: ignore[arg-type]
        differs=frozenset(differs),
        empty=frozenset(empty),
        compatibility=req.compatibility,
        generation=generation,
    )


def decide(
    stored: StoredSession | None,
    req: DecideRequest,
    policy: Policy,
    generation: GenerationCheck = "not_compared",
    declaration: str | None = None,
    changed: list[ComponentName] | None = None,
) -> DecideReply:
    """Resume or start fresh: the policy's first clause that matches (`stored` None: no record,
    or one the runner may not see). `changed`: the components that differ, named in the reply
    when the generations were compared and differ."""
    rule = first_rule(policy.resume, facts_of(stored, req, generation))
    if rule is None:  # a loaded policy is total (its invariants were checked)
        raise ValueError(f"no resume clause of policy {policy.version} applies")
    if rule.reason is None and stored is not None:
        return DecideReply(
            mode="resume",
            resume_session_id=stored.handle,
            transcript=RESUME_TRANSCRIPT,
            reason=None,
            revision=stored.revision,
            epoch=stored.epoch,
            rule=rule.id,
            policy=policy.version,
            generation=generation,
            declaration=declaration if generation == "declared" else None,
            changed_components=changed if generation == "declared" else None,
        )
    return DecideReply(
        mode="fresh",
        resume_session_id=None,
        transcript=FRESH_TRANSCRIPT,
        reason=rule.reason,
        revision=stored.revision if stored else None,
        epoch=stored.epoch if stored else None,
        rule=rule.id,
        policy=policy.version,
        generation=generation if stored is not None else "not_compared",
        changed_components=changed if stored is not None and generation == "changed" else None,
    )


def view(stored: StoredSession) -> SessionView:
    """What a `get` shows of a record: never its generation value, only whether it has one."""
    v1 = stored.v1
    return SessionView(
        native_session_id=v1["native_session_id"],
        adapter=v1["adapter"],
        model=v1["model"],
        cwd=v1["cwd"],
        cursor=v1["cursor"],
        checkpoint_policy=v1["checkpoint_policy"],
        state=stored.state,  # type: ignore[arg-type]
        revision=stored.revision,
        epoch=stored.epoch,
        updated_at=v1["updated_at"],
        has_generation=stored.has_generation,
        generation_trusted=stored.generation_trusted,
        owner=stored.owner or None,
        components=stored.component_names(),
        changed_components=stored.last_changed(),
    )
