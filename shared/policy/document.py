"""The policy file: JSON, read into typed rows and held against the invariants.

    {"version": "candidate-2", "recovery": [ROW, ...], "resume": [CLAUSE, ...]}

`recovery` and `resume` are each optional (absent: the shipped one). A row names its `id`, the
`classes` it matches (with `or_pending_tool_call`), its conditions (`min_attempt`, `policy`,
`governed_wait_elapsed`, `budget_spent`), an `action` (a runner action, or `archive`: archive,
then `open_replacement`) and a `reason`; whether the action holds the saved session
(`reconcile`, `operator`) or rejects its handle (`continue_fresh`) follows from the action. A
clause names its `id`, its contract `rule` number, a `check`, the `value` or `field` the check
reads, `only_when` a compatibility, and a `reason` (null: resume). docs/policies.md is the
reference; `continuity policy show` prints the shipped policy in this form.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from shared.contract.types import (
    CheckpointPolicy,
    Compatibility,
    DecisionReason,
    FailureClass,
    PolicyVersion,
    RowId,
    SessionReason,
    SessionState,
)

from . import invariants
from .invariants import PolicyRefused
from .policy import RECOVERY, RESUME, Policy
from .recovery import Row, Verdict
from .resume import COMPARED, STORED, Check, Rule

MAX_BYTES = 64 * 1024
"""A policy file larger than this is refused before it is parsed."""
MAX_ROWS = 64

Id = RowId
Version = PolicyVersion
Attempt = Annotated[int, msgspec.Meta(ge=1, le=10)]

HOLDING: frozenset[str] = frozenset({"reconcile", "operator"})
"""Actions after which the saved session is held: not a policy's choice (contract 4.4)."""
REJECTING: frozenset[str] = frozenset({"continue_fresh"})
"""Actions after which the saved handle is rejected (contract 3.4), so that the next decide
answers `fresh` with the full transcript: not a policy's choice either (contract 4.4)."""


class RowDoc(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    id: Id
    classes: list[FailureClass] = []
    or_pending_tool_call: bool = False
    min_attempt: Attempt | None = None
    policy: CheckpointPolicy | None = None
    governed_wait_elapsed: bool = False
    budget_spent: bool = False
    action: Verdict
    reason: DecisionReason


class ClauseDoc(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    id: Id
    rule: Annotated[int, msgspec.Meta(ge=1, le=9)]
    check: Check
    value: SessionState | None = None
    """For `state`: the state matched."""
    field: str | None = None
    """For `differs`: the request field compared (`model`, `cwd`, `latest_cursor`); for
    `stored_empty`: the stored field (`model`, `cwd`, `cursor`)."""
    only_when: Compatibility | None = None
    reason: SessionReason | None


class PolicyDoc(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    version: Version
    recovery: Annotated[list[RowDoc], msgspec.Meta(max_length=MAX_ROWS)] | None = None
    resume: Annotated[list[ClauseDoc], msgspec.Meta(max_length=MAX_ROWS)] | None = None


_decoder = msgspec.json.Decoder(PolicyDoc)


def load(data: bytes) -> Policy:
    """A policy from its file, or `PolicyRefused` naming the invariant it breaks (`format` for
    a file that is not a policy at all)."""
    if len(data) > MAX_BYTES:
        raise PolicyRefused("format", f"a policy file holds at most {MAX_BYTES} bytes")
    try:
        doc = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        # msgspec names the path and the expected type, never echoing the value.
        raise PolicyRefused("format", str(exc)) from None
    policy = Policy(
        version=doc.version,
        recovery=RECOVERY if doc.recovery is None else tuple(_row(r) for r in doc.recovery),
        resume=RESUME if doc.resume is None else tuple(_clause(c) for c in doc.resume),
    )
    _unique([r.id for r in policy.recovery] + [c.id for c in policy.resume])
    invariants.check(policy)
    return policy


def _row(doc: RowDoc) -> Row:
    if not doc.classes and not doc.or_pending_tool_call:
        raise PolicyRefused("format", f"row {doc.id} matches no class")
    return Row(
        doc.id,
        tuple(doc.classes),
        verdict=doc.action,
        reason=doc.reason,
        holds_session=doc.action in HOLDING,
        rejects_session=doc.action in REJECTING,
        or_pending_tool_call=doc.or_pending_tool_call,
        min_attempt=doc.min_attempt,
        policy=doc.policy,
        governed_wait_elapsed=doc.governed_wait_elapsed,
        budget_spent=doc.budget_spent,
    )


def _clause(doc: ClauseDoc) -> Rule:
    request_field = stored_field = value = ""
    if doc.check == "state":
        if doc.value is None:
            raise PolicyRefused("format", f"clause {doc.id}: a `state` check names its `value`")
        value = doc.value
    elif doc.check == "differs":
        if doc.field not in COMPARED:
            raise PolicyRefused("format", f"clause {doc.id}: `differs` compares one of {sorted(COMPARED)}")
        request_field, stored_field = doc.field, COMPARED[doc.field]
    elif doc.check == "stored_empty":
        if doc.field not in STORED:
            raise PolicyRefused("format", f"clause {doc.id}: `stored_empty` reads one of {sorted(STORED)}")
        stored_field = doc.field
    return Rule(
        doc.id,
        doc.rule,
        doc.check,
        doc.reason,
        value=value,
        request_field=request_field,
        stored_field=stored_field,
        only_when=doc.only_when,
    )


def _unique(ids: list[str]) -> None:
    seen: set[str] = set()
    for row_id in ids:
        if row_id in seen:
            raise PolicyRefused("format", f"the id {row_id} names two rows")
        seen.add(row_id)


def dump(policy: Policy) -> bytes:
    """The policy as its file (indented JSON), so that a candidate starts from a copy."""
    doc = PolicyDoc(
        version=policy.version,
        recovery=[
            RowDoc(
                id=r.id,
                classes=list(r.classes),
                or_pending_tool_call=r.or_pending_tool_call,
                min_attempt=r.min_attempt,
                policy=r.policy,
                governed_wait_elapsed=r.governed_wait_elapsed,
                budget_spent=r.budget_spent,
                action=r.verdict,
                reason=r.reason,
            )
            for r in policy.recovery
        ],
        resume=[
            ClauseDoc(
                id=c.id,
                rule=c.number,
                check=c.check,
                value=c.value or None,  # type: ignore[arg-type]
                field=c.request_field or c.stored_field or None,
                only_when=c.only_when,
                reason=c.reason,
            )
            for c in policy.resume
        ],
    )
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


def from_file(path: str) -> Policy:
    """A policy from a file path (`PolicyRefused` with `format` for an unreadable file)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise PolicyRefused("format", f"cannot read the policy file: {exc.strerror}") from None
    return load(data)
