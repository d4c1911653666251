"""What the console reads from its forms and addresses, checked before anything is sent: each
reader returns what the contract asks for, or raises `Failure` (400) saying what is wrong."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from services.console.failure import Failure
from shared.contract import SessionRef
from shared.contract.limits import EVIDENCE_CHARS, NAME_CHARS, POLICY_MAX_BYTES, REPLAY_MAX_SINCE_S
from shared.contract.policy import PreviewRequest, ReplayRequest
from shared.contract.types import RUNNER_ID_PATTERN, TOKEN_PATTERN

FORM_BYTES = 64 * 1024
"""The largest form body read. The largest valid form, the resolve form with 2000 characters of
4-byte UTF-8 (12 bytes each once percent-encoded) and its other fields, is about 24,100 bytes;
the evidence box lets a browser send at most `EVIDENCE_BOX` UTF-16 units of at most 9 bytes
each, so whatever a browser sends is read, and a refused form comes back with its text."""
EVIDENCE_BOX = 2 * EVIDENCE_CHARS
"""The evidence box's `maxlength`. Browsers count UTF-16 units, where a character outside the
Basic Multilingual Plane (𠮷) counts 2, so `maxlength` 2000 would cut valid evidence short; the
console counts characters, as the contract does, and says when there are too many."""
REPLAY_FORM_BYTES = 2 * POLICY_MAX_BYTES + 16 * 1024
"""The largest replay form read: a multipart form (its text is not percent-encoded) with a pasted
and an uploaded policy of at most `POLICY_MAX_BYTES` each, the filters and the token."""
REPLAY_MAX_HOURS = REPLAY_MAX_SINCE_S / 3600
OUTCOMES = ("completed", "not_performed", "mixed")
SESSION_FIELDS = ("tenant", "conversation_id", "agent_id")
_TOKEN = re.compile(TOKEN_PATTERN)
_RUNNER_ID = re.compile(RUNNER_ID_PATTERN)
_NOT_A_TENANT = "A tenant is 1 to 128 letters, digits, '.', '_', ':' or '-'."
_NOT_A_SESSION = (
    "That is not a session: its tenant, conversation and agent are each 1 to 128 letters, digits, "
    "'.', '_', ':' or '-'."
)


def run_id(value: str) -> str:
    """`value`, if it is a run id."""
    if not _TOKEN.match(value):
        raise Failure(400, "That is not a run id.")
    return value


def session_ref(query: Mapping[str, str]) -> SessionRef:
    """The session a page's query names by its three ids."""
    values = [query.get(field, "") for field in SESSION_FIELDS]
    if not all(_TOKEN.match(value) for value in values):
        raise Failure(400, _NOT_A_SESSION)
    return SessionRef(*values)


def resolve_evidence(form: MultiDictProxy[Any]) -> str:
    """The resolve form's evidence, as the contract counts it: browsers send a line break as CRLF
    and count it as one character, and so does the console."""
    return str(form.get("evidence", "")).replace("\r\n", "\n").strip()


def resolve_error(outcome: str, evidence: str) -> str | None:
    """What is wrong with a resolve form's outcome and evidence (as `resolve_evidence` reads
    it), or None."""
    if outcome not in OUTCOMES:
        return "Choose what the tool call did."
    if not evidence:
        return "Say how the outcome was checked."
    if len(evidence) > EVIDENCE_CHARS:
        return f"The evidence is {len(evidence)} characters; at most {EVIDENCE_CHARS}."
    return None


def transfer_target(form: MultiDictProxy[Any], back: tuple[str, str]) -> str:
    """The runner a confirmed transfer form gives the session to; a refusal links `back`."""
    runner_id = str(form.get("runner_id", ""))
    if not _RUNNER_ID.match(runner_id):
        raise Failure(400, "Choose the runner to give the session to.", back)
    if form.get("confirm") != "yes":
        raise Failure(400, "Confirm the transfer before submitting it.", back)
    return runner_id


class ReplayForm:
    """What the replay form holds, as typed: shown again with the form when it is refused."""

    def __init__(self, form: MultiDictProxy[Any] | None = None) -> None:
        self.policy = str(form.get("policy", "")) if form else ""
        self.since_hours = str(form.get("since_hours", "")).strip() if form else ""
        self.runner_id = str(form.get("runner_id", "")).strip() if form else ""
        self.tenant = str(form.get("tenant", "")).strip() if form else ""
        upload = form.get("policy_file") if form else None
        self.upload = upload if isinstance(upload, web.FileField) and upload.filename else None

    def request(self) -> ReplayRequest:
        """The replay it asks for."""
        policy = self._policy()
        since_s = self._since_s()
        if self.runner_id and not _RUNNER_ID.match(self.runner_id):
            raise Failure(400, "A runner id is 1 to 64 letters, digits, '_' or '-'.")
        if self.tenant and not _TOKEN.match(self.tenant):
            raise Failure(400, _NOT_A_TENANT)
        return ReplayRequest(
            policy=policy, since_s=since_s, runner_id=self.runner_id or None, tenant=self.tenant or None
        )

    def _policy(self) -> str | None:
        pasted = self.policy if self.policy.strip() else None
        uploaded = self._uploaded()
        if pasted is not None and uploaded is not None:
            raise Failure(400, "Paste a policy or upload one, not both.")
        policy = pasted if pasted is not None else uploaded
        if policy is not None and len(policy.encode()) > POLICY_MAX_BYTES:
            size = len(policy.encode())
            raise Failure(400, f"The policy is {size} bytes; a policy file holds at most {POLICY_MAX_BYTES}.")
        return policy

    def _uploaded(self) -> str | None:
        if self.upload is None:
            return None
        data = self.upload.file.read(POLICY_MAX_BYTES + 1)
        if len(data) > POLICY_MAX_BYTES:
            raise Failure(400, f"The uploaded file is larger than a policy file ({POLICY_MAX_BYTES} bytes).")
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise Failure(400, "The uploaded file is not UTF-8 text.") from None
        return text if text.strip() else None

    def _since_s(self) -> float | None:
        if not self.since_hours:
            return None
        try:
            hours = float(self.since_hours)
        except ValueError:
            hours = math.nan
        if not (math.isfinite(hours) and 0 < hours <= REPLAY_MAX_HOURS):
            raise Failure(400, f"Since is a number of hours above 0 and at most {REPLAY_MAX_HOURS:g}.")
        return min(hours * 3600, REPLAY_MAX_SINCE_S)


class PreviewForm:
    """What the preview form holds. The adapter and the tenant are shown again as typed; the
    generation is a compatibility generation value, read only to be sent and never shown back:
    the form comes back with its box empty, whatever happened."""

    def __init__(self, form: MultiDictProxy[Any] | None = None) -> None:
        self.adapter = str(form.get("adapter", "")).strip() if form else ""
        self.tenant = str(form.get("tenant", "")).strip() if form else ""
        self._generation = str(form.get("generation", "")).strip() if form else ""

    def request(self) -> PreviewRequest:
        """The preview it asks for; a refusal names the wrong field, never the generation's value."""
        if not 0 < len(self.adapter) <= NAME_CHARS:
            raise Failure(400, f"An adapter is 1 to {NAME_CHARS} characters.")
        if not _TOKEN.match(self._generation):
            raise Failure(
                400,
                "A generation is 1 to 128 letters, digits, '.', '_', ':' or '-'; type it again "
                "(the console never shows a generation back).",
            )
        if self.tenant and not _TOKEN.match(self.tenant):
            raise Failure(400, _NOT_A_TENANT)
        return PreviewRequest(adapter=self.adapter, generation=self._generation, tenant=self.tenant or None)
