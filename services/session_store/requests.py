"""The session-store's request handlers (contract 3.2 to 3.5, and section 10).

Each request comes either from a runner, on `continuity.sessions.<runner_id>.<op>` (the server
put the runner_id there), or from the services' own account (operators, the CLI) on
`continuity.sessions.<op>`. A runner acts only on sessions of its tenants that it owns, or that
nobody owns yet: any other session is answered exactly as one that does not exist (a commit,
which would create it, is refused `not_found`), except that a commit over a session of its
tenant that another runner owns is refused `session_not_owned`, so that a runner pool knows to
claim it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import msgspec

from shared.contract.components import generation_of
from shared.contract.errors import (
    CATALOGUE,
    CLAIM_REFUSED,
    INVALID_FIELD,
    MISSING_FIELD,
    NOT_FOUND,
    RUNNER_NOT_ISSUED,
    SESSION_HELD,
)
from shared.contract.policy import (
    Declaration,
    DeclarationsReply,
    DeclarationsRequest,
    DeclareRequest,
    PreviewReply,
    PreviewRequest,
    RevokeRequest,
)
from shared.contract.sessions import (
    CommitReply,
    CommitRequest,
    DecideReply,
    DecideRequest,
    GetRequest,
    RejectReply,
    RejectRequest,
    SessionRef,
    SessionView,
)
from shared.contract.tenancy import (
    ClaimRequest,
    ListedRunner,
    OwnershipReply,
    RunnerGetRequest,
    RunnerPutRequest,
    RunnerRecord,
    RunnerRevokeRequest,
    RunnersListReply,
    RunnersListRequest,
    SessionAuditReply,
    SessionAuditRequest,
    TransferRequest,
)
from shared.contract.types import ComponentName, GenerationCheck
from shared.platform import metrics
from shared.platform.logs import Log
from shared.policy import SHIPPED, Policy
from shared.records import runners as identity
from shared.records.compatibility import NOT_DECLARED
from shared.records.runners import Access, RunnerDirectory
from shared.records.session import StoredSession

from . import preview, step
from .store import SessionStore

log = Log("session-store")

NO_RECORD = "no session record for this session"
"""The one text of a missing record, whether it is missing or another runner's."""


class SessionRequests:
    def __init__(
        self,
        store: SessionStore,
        directory: RunnerDirectory,
        *,
        enforced: bool = True,
        claims_allowed: bool = False,
        policy: Policy = SHIPPED,
        listing: Callable[[list[RunnerRecord]], Awaitable[list[ListedRunner]]] | None = None,
    ) -> None:
        self.store = store
        self.directory = directory
        self.policy = policy
        self.declarations = store.declarations
        self._enforced = enforced
        self._claims_allowed = claims_allowed
        self._listing = listing
        """Adds each runner's usage and connections to the list (services/session_store/presence.py)."""

    # -- who may act -------------------------------------------------------------------------

    async def _access(self, runner_id: str | None, session: SessionRef) -> bool:
        """Whether the runner may act on sessions of this tenant (None: the services' account)."""
        if runner_id is None:
            return True
        record = await self.directory.get(runner_id)
        verdict = identity.access(record, session.tenant, enforced=self._enforced)
        if verdict is Access.ALLOWED:
            return True
        identity.refused(runner_id, record, verdict.value)
        return False

    async def _visible(
        self, runner_id: str | None, session: SessionRef, stored: StoredSession | None
    ) -> bool:
        """Whether the runner may see this record: its tenant's, and its own or nobody's."""
        if not await self._access(runner_id, session):
            return False
        if stored is not None and identity.owner_refusal(stored.owner, runner_id):
            assert runner_id is not None
            identity.refused(runner_id, await self.directory.get(runner_id), "session_not_owned")
            return False
        return True

    def _visible_now(self, runner_id: str, session: SessionRef, stored: StoredSession | None) -> bool:
        """The common case of `_visible` without a coroutine: the runner's record is cached and
        it may see the record. False means "ask `_visible`" (which also counts a refusal)."""
        cached = self.directory.cached(runner_id)
        if cached is None:
            return False
        allowed = identity.access(cached.record, session.tenant, enforced=self._enforced) is Access.ALLOWED
        return allowed and (stored is None or not identity.owner_refusal(stored.owner, runner_id))

    # -- decide ------------------------------------------------------------------------------

    def decide(self, req: DecideRequest, runner_id: str | None = None) -> Awaitable[DecideReply]:
        """A pipelined endpoint: the record's read is sent now, the rules run on its reply."""
        if req.ready_components is not None:
            made_of(req.ready_components, req.ready_generation, "ready_components", "ready_generation")
        return self._decided(self.store.read(req.session.key), req, runner_id)

    async def _decided(
        self, pending: Awaitable[StoredSession | None], req: DecideRequest, runner_id: str | None
    ) -> DecideReply:
        stored = await pending
        if runner_id is not None and not self._visible_now(runner_id, req.session, stored):
            if not await self._visible(runner_id, req.session, stored):
                stored = None
        generation: GenerationCheck = "not_compared"
        declared = NOT_DECLARED
        changed: list[ComponentName] | None = None
        if stored is not None:
            generation = step.generation_check(stored, req)
            if generation == "changed":
                changed = step.changed_components(stored, req)
                if stored.v1["adapter"] == req.adapter:
                    # Generations differ: an operator may have declared the new one compatible,
                    # or every component that changed.
                    assert req.ready_generation is not None
                    declared = await self.declarations.declared(
                        req.adapter, stored.generation, req.ready_generation, changed
                    )
                    if declared.resumes:
                        generation = "declared"
        reply = step.decide(stored, req, self.policy, generation, declared.pair, changed)
        metrics.adder(metrics.SESSION_DECISIONS, reply.mode, reply.reason or "none")()
        return reply

    # -- commit, get, reject -----------------------------------------------------------------

    async def commit(self, req: CommitRequest, runner_id: str | None = None) -> CommitReply:
        if req.compatibility_components is not None:
            made_of(
                req.compatibility_components,
                req.compatibility_generation,
                "compatibility_components",
                "compatibility_generation",
            )
        if not await self._access(runner_id, req.session):
            metrics.adder(metrics.SESSION_COMMITS, NOT_FOUND.code)()
            raise NOT_FOUND.error(NO_RECORD)
        result = await self.store.commit(req, runner_id)
        metrics.adder(metrics.SESSION_COMMITS, result.code)()
        if result.code != "ok":
            if result.code == "session_not_owned" and runner_id is not None:
                identity.refused(runner_id, await self.directory.get(runner_id), result.code)
            raise CATALOGUE[result.code].error()  # revision_conflict, stale_epoch, session_held, ...
        return CommitReply(revision=result.revision, epoch=result.epoch)

    async def get(self, req: GetRequest, runner_id: str | None = None) -> SessionView:
        stored = await self.store.read(req.session.key)
        if stored is None or not await self._visible(runner_id, req.session, stored):
            raise NOT_FOUND.error(NO_RECORD)
        return step.view(stored)

    async def reject(self, req: RejectRequest, runner_id: str | None = None) -> RejectReply:
        if not await self._access(runner_id, req.session):
            return RejectReply(cleared=False)
        return RejectReply(cleared=await self.store.reject(req.session.key, req.native_session_id, runner_id))

    # -- ownership ---------------------------------------------------------------------------

    async def claim(self, req: ClaimRequest, runner_id: str) -> OwnershipReply:
        """A runner asks for a session of its tenant that another runner owns."""
        if not await self._access(runner_id, req.session):
            raise NOT_FOUND.error(NO_RECORD)
        if not self._claims_allowed:
            identity.refused(runner_id, await self.directory.get(runner_id), CLAIM_REFUSED.code)
            raise CLAIM_REFUSED.error()
        code, reply = await self.store.give(
            req.session.key, runner_id, actor=runner_id, kind="claimed", held_refuses=True
        )
        if code == "not_found":
            raise NOT_FOUND.error(NO_RECORD)
        if code == "session_held":
            raise SESSION_HELD.error(
                "the session is held for an operator: only an operator's transfer moves it"
            )
        return reply

    async def transfer(self, req: TransferRequest) -> OwnershipReply:
        """An operator gives a session to a runner issued for its tenant (held ones too)."""
        record = await self.directory.get(req.runner_id)
        verdict = identity.access(record, req.session.tenant, enforced=True)
        if verdict is not Access.ALLOWED:
            raise RUNNER_NOT_ISSUED.error()
        code, reply = await self.store.give(
            req.session.key, req.runner_id, actor=req.actor, kind="transferred", held_refuses=False
        )
        if code == "not_found":
            raise NOT_FOUND.error(NO_RECORD)
        return reply

    async def audit(self, req: SessionAuditRequest) -> SessionAuditReply:
        return SessionAuditReply(items=await self.store.ownership(req.session.key))

    # -- declared compatibility and the rollout preview (operators) --------------------------

    async def declare(self, req: DeclareRequest) -> Declaration:
        pair = (req.saved_generation, req.ready_generation)
        if req.component is not None and pair != (None, None):
            raise INVALID_FIELD.error("`component` declares a component: give no generation with it")
        if req.component is None and None in pair:
            name = "saved_generation" if req.saved_generation is None else "ready_generation"
            raise MISSING_FIELD.error(f"required field `{name}` is missing (or give `component`)")
        code, found = await self.declarations.declare(
            req.adapter, req.saved_generation, req.ready_generation, req.actor, req.note, req.component
        )
        log.info(
            "compatibility_declared",
            id=found.id,
            adapter=found.adapter,
            component=found.component,
            actor=req.actor,
            outcome=code,
        )
        return found

    async def revoke_declaration(self, req: RevokeRequest) -> Declaration:
        found = await self.declarations.revoke(req.id, req.actor)
        if found is None:
            raise NOT_FOUND.error("no such declaration")
        log.info("compatibility_revoked", id=found.id, adapter=found.adapter, actor=req.actor)
        return found

    async def declarations_list(self, req: DeclarationsRequest) -> DeclarationsReply:
        items = await self.declarations.all()
        audit = await self.declarations.audit()
        if req.adapter is not None:
            items = [d for d in items if d.adapter == req.adapter]
            audit = [a for a in audit if a.adapter == req.adapter]
        return DeclarationsReply(items=items, audit=audit)

    async def preview(self, req: PreviewRequest) -> PreviewReply:
        if req.generation is None and req.components is None:
            raise MISSING_FIELD.error("required field `generation` is missing (or give `components`)")
        if req.generation is not None and req.components is not None:
            made_of(req.components, req.generation, "components", "generation")
        return await preview.preview(self.store.redis, self.declarations, self.policy, req)

    # -- the runner directory (operators) ----------------------------------------------------

    async def runner_put(self, req: RunnerPutRequest) -> RunnerRecord:
        return await self.directory.put(req.runner_id, list(req.tenants), req.actor)

    async def runner_revoke(self, req: RunnerRevokeRequest) -> RunnerRecord:
        record = await self.directory.revoke(req.runner_id, req.actor)
        if record is None:
            raise NOT_FOUND.error("no such runner")
        return record

    async def runner_get(self, req: RunnerGetRequest) -> RunnerRecord:
        record = await self.directory.read(req.runner_id)
        if record is None:
            raise NOT_FOUND.error("no such runner")
        return record

    async def runners_list(self, req: RunnersListRequest) -> RunnersListReply:
        records = await self.directory.list()
        if self._listing is not None:
            return RunnersListReply(items=await self._listing(records))
        return RunnersListReply(items=[ListedRunner(**msgspec.structs.asdict(r)) for r in records])


def made_of(
    digests: Mapping[ComponentName, str], generation: str | None, field: str, generation_field: str
) -> None:
    """Refuse components whose digests do not make the generation sent with them (3.2, 3.3):
    they would name changes the generation does not have. The message names the fields only."""
    if generation is None or generation_of(digests) != generation:
        raise INVALID_FIELD.error(f"value at `$.{field}` is not the components of `$.{generation_field}`")
