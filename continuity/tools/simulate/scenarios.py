"""The scenarios a simulated runner plays, the mix that picks them, and the decision each one
must get under the contract (sections 4.3 and 4.4, re-stated here on purpose: the simulator
checks the services against the contract, not against their own code).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from shared.contract.types import Action, CheckpointPolicy, DecisionReason, FailureClass

ATTEMPT_BUDGET = 3
"""Contract 4.1: every try of a run shares one budget of 3."""

ATTEMPT_LIMIT = 40
"""A runner gives a run up after this many failed attempts (each one decided, the later ones
continued fresh by the operator): at the lowest success probability of the catalogue the chance
of reaching it is below one in a billion, so it only bounds a run, it does not shape the rates."""

POLICIES: tuple[CheckpointPolicy, ...] = (
    "same_session_only",
    "allow_replacement_after_governed_wait",
    "allow_replacement_after_resume_failure",
)

DeadKind = Literal["quarantine", "invalid"]


@dataclass(frozen=True, slots=True)
class Harness:
    """The harness a scenario's sessions live in (a name of sdk/harnesses.json), named on its
    events (contract 4.6) so that `continuity.runs.stats` groups its decisions apart."""

    name: str
    version: str


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    label: str
    """What happened, for people: the first step of a run's story."""
    sends: str
    """What the runner's event carries."""
    outcome: str
    """What the contract says must follow."""
    failure_class: FailureClass | None
    """The class the event's typed or signed fields carry; None: it gets no decision at all."""
    pending_tool_call: bool = False
    dead: DeadKind | None = None
    dead_reason: str | None = None
    """The dead letter's reason, when the contract names it."""
    success_probability: float | None = None
    """The true chance that the session of a decided attempt (`retry_same_session`,
    `open_replacement`, `continue_fresh`) then completes its turn; otherwise it fails again, at
    the next attempt. None: the event gets no decision."""
    harness: Harness | None = None


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "drop",
            "transport drop",
            "no typed error, or a transport error code outside the closed classes",
            "unclassified: retry_same_session, or archive then open_replacement when the policy "
            "allows it; operator once 3 attempts are spent",
            "unclassified",
            success_probability=0.9,
            harness=Harness("claude-code", "2.1.332"),
        ),
        Scenario(
            "disguised",
            "transport drop, refusal words in the message only",
            "an untyped error whose message names closed classes",
            "unclassified (a message is never read): as a transport drop",
            "unclassified",
            success_probability=0.8,
            harness=Harness("codex", "0.63.0"),
        ),
        Scenario(
            "refusal",
            "attach refused (signed)",
            "a command result classified provider_attach_refused, signed with a live key",
            "operator native_provider_state_incompatible, never a replacement; saved session held",
            "provider_attach_refused",
            success_probability=0.6,
            harness=Harness("gemini-cli", "0.17.1"),
        ),
        Scenario(
            "pending",
            "pending tool call",
            "a pending_tool_call (sometimes also a signed provider_side_effect_pending)",
            "reconcile native_provider_side_effect_pending; an operator resolves; continue_fresh",
            "unclassified",
            pending_tool_call=True,
            success_probability=0.7,
            harness=Harness("opencode", "1.0.119"),
        ),
        Scenario(
            "source",
            "workspace source changed",
            "error.code native_runner_source_<part>_reconciliation_required",
            "operator native_runner_source_reconciliation_required",
            "source_reconciliation_required",
            success_probability=0.5,
            harness=Harness("claude-agent-sdk", "0.1.58"),
        ),
        Scenario(
            "incompatible",
            "provider artifact incompatible",
            "error.code runner_remote_provider_artifact_incompatible",
            "operator native_provider_state_incompatible",
            "provider_state_incompatible",
            success_probability=0.4,
            harness=Harness("openai-agents", "0.6.1"),
        ),
        Scenario(
            "replay",
            "event replay conflict",
            "error.code native_event_replay_conflict",
            "operator native_event_replay_conflict",
            "event_replay_conflict",
            success_probability=0.55,
            harness=Harness("acp", "0.9.0"),
        ),
        Scenario(
            "duplicate",
            "transport drop, sent three times",
            "one event re-sent with its event_id, and again under a new event_id",
            "exactly one decision for the (run_id, attempt)",
            "unclassified",
            success_probability=0.85,
            harness=Harness("codex-app-server", "0.63.0"),
        ),
        Scenario(
            "forged",
            "forged signature",
            "a refusal whose signature was made with the wrong key material",
            "quarantined (signature_invalid), no decision",
            None,
            dead="quarantine",
            dead_reason="signature_invalid",
        ),
        Scenario(
            "unknown_key",
            "unknown key id",
            "a refusal signed under a key id no service knows",
            "quarantined (unknown_key), no decision",
            None,
            dead="quarantine",
            dead_reason="unknown_key",
        ),
        Scenario(
            "garbage",
            "garbage payload",
            "bytes that are not JSON, or JSON that breaks the event's schema or claims another runner",
            "dead-lettered as invalid, no decision",
            None,
            dead="invalid",
        ),
    )
}

DEFAULT_MIX = (
    "drop=40,disguised=5,refusal=10,pending=10,source=5,incompatible=3,replay=2,"
    "duplicate=5,forged=5,unknown_key=5,garbage=5"
)


def parse_mix(text: str) -> dict[str, int]:
    """`name=weight,...` → weights; unknown names and negative or all-zero weights are errors."""
    weights: dict[str, int] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if name not in SCENARIOS:
            raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
        try:
            weight = int(value) if sep else 1
        except ValueError:
            raise ValueError(f"the weight of {name!r} is not a whole number") from None
        if weight < 0:
            raise ValueError(f"the weight of {name!r} is negative")
        weights[name] = weights.get(name, 0) + weight
    if sum(weights.values()) <= 0:
        raise ValueError("the mix has no scenario with a positive weight")
    return {k: v for k, v in weights.items() if v > 0}


def turn_completes(scenario: Scenario, rng: random.Random) -> bool:
    """One draw of the truth: whether the session of a decided attempt of `scenario` completes
    its turn (else the run fails again)."""
    p = scenario.success_probability
    return p is not None and rng.random() < p


RECOVERED_STATUS: dict[str, str] = {
    "retry_same_session": "recovered",
    "open_replacement": "recovered_replaced",
    "continue_fresh": "recovered_fresh",
}
"""Contract 4.6: a run's final status once the session of its decided attempt completed a turn,
by the action of that decision."""


class Mix:
    """Draws scenarios in proportion to their weights, from a seeded generator."""

    def __init__(self, weights: dict[str, int], rng: random.Random) -> None:
        self._names = list(weights)
        self._weights = [weights[n] for n in self._names]
        self._rng = rng

    def draw(self) -> Scenario:
        return SCENARIOS[self._rng.choices(self._names, self._weights)[0]]


# ---- the decision each event must get (contract 4.4, first matching row wins) ----------------

Verdict = Action | Literal["archive"]
"""A runner action, or `archive`: the archiver moves the state, then decides."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What a runner knows about an event it sent: enough to predict the decision."""

    failure_class: FailureClass
    pending_tool_call: bool
    attempt: int
    policy: CheckpointPolicy
    governed_wait_elapsed: bool


@dataclass(frozen=True, slots=True)
class Expected:
    verdict: Verdict
    reason: DecisionReason
    rule: str
    """The contract's row id (4.4), which the decision and its explanation name."""


def _unclassified(f: Facts) -> bool:
    return f.failure_class == "unclassified"


DECISION_TABLE: tuple[tuple[Callable[[Facts], bool], Expected], ...] = (
    (
        lambda f: f.failure_class == "provider_side_effect_pending" or f.pending_tool_call,
        Expected("reconcile", "native_provider_side_effect_pending", "4.4.1"),
    ),
    (
        lambda f: f.failure_class in ("provider_attach_refused", "provider_state_incompatible"),
        Expected("operator", "native_provider_state_incompatible", "4.4.2"),
    ),
    (
        lambda f: f.failure_class == "source_reconciliation_required",
        Expected("operator", "native_runner_source_reconciliation_required", "4.4.3"),
    ),
    (
        lambda f: f.failure_class == "event_replay_conflict",
        Expected("operator", "native_event_replay_conflict", "4.4.4"),
    ),
    (
        lambda f: (_unclassified(f) or f.failure_class == "session_busy") and f.attempt >= ATTEMPT_BUDGET,
        Expected("operator", "native_session_retry_exhausted", "4.4.6"),
    ),
    (
        lambda f: _unclassified(f) and f.policy == "allow_replacement_after_resume_failure",
        Expected("archive", "native_session_continuity_break", "4.4.7"),
    ),
    (
        lambda f: (
            _unclassified(f)
            and f.policy == "allow_replacement_after_governed_wait"
            and f.governed_wait_elapsed
        ),
        Expected("archive", "native_session_continuity_break", "4.4.8"),
    ),
    (_unclassified, Expected("retry_same_session", "native_session_interrupted", "4.4.9")),
    (
        lambda f: f.failure_class == "native_session_missing",
        Expected("continue_fresh", "native_session_missing", "4.4.10"),
    ),
    (
        lambda f: f.failure_class == "context_overflow",
        Expected("operator", "native_context_overflow", "4.4.11"),
    ),
    (
        lambda f: f.failure_class == "transcript_corrupt",
        Expected("operator", "native_transcript_corrupt", "4.4.12"),
    ),
    (
        lambda f: f.failure_class == "session_busy",
        Expected("retry_same_session", "native_session_busy", "4.4.13"),
    ),
)


def expected(facts: Facts) -> Expected:
    for when, outcome in DECISION_TABLE:
        if when(facts):
            return outcome
    raise ValueError(f"no row for failure class {facts.failure_class}")


ARCHIVE_FAILED: DecisionReason = "runner_continuity_break_archive_failed"
ARCHIVE_FAILED_PREFIX = "runner_continuity_break_archive_failed: exit="
DETAIL_LIMIT = 512


def after_failed_archive(attempt: int) -> Action:
    """Contract 5.3: retry while the attempt budget lasts, else an operator."""
    return "retry_same_session" if attempt < ATTEMPT_BUDGET else "operator"
