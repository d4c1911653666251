"""What a simulation is asked to do (`Settings`) and what came of it (`Result`): the fleet
fills them in and the report reads them, so neither needs the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from continuity.tools.simulate.checker import Checker
from continuity.tools.simulate.keys import DEMO_KEYS
from continuity.tools.simulate.outcomes import Comparison
from continuity.tools.simulate.runner import Story
from continuity.tools.simulate.scenarios import DEFAULT_MIX, parse_mix


@dataclass
class Settings:
    runners: int = 4
    events: int | None = 200
    """Runs to start (each begins with one resume failure; retries add events). None: --seconds."""
    seconds: float | None = None
    rate: float = 50.0
    """Runs started per second, across the fleet."""
    mix: dict[str, int] = field(default_factory=lambda: parse_mix(DEFAULT_MIX))
    archive_fail_rate: float = 0.1
    archive_timeout_rate: float = 0.05
    seed: int | None = None
    nats_url: str = "nats://127.0.0.1:4222"
    keys: dict[str, bytes] = field(default_factory=lambda: dict(DEMO_KEYS))
    deadline_s: float = 20.0
    """How long after an event (or an operator's step) its decision may take."""
    archive_timeout_s: float = 30.0
    """The archiver's CONTINUITY_ARCHIVE_TIMEOUT_S: an unanswered archive takes this long."""
    settle_s: float = 0.5
    """Listening after the last expected outcome, for late second decisions."""
    operator: bool = True
    """False: the simulated operator does nothing, so that a person can resolve by hand."""


@dataclass
class Judgement:
    """The services' judgment of the simulation's outcomes, next to the runners' truth."""

    comparison: Comparison | None
    """Per row and scenario; None when `continuity.runs.stats` did not answer."""
    statuses: dict[str, int]
    """The simulation's runs by their status in `continuity.runs.list`."""
    unsettled: list[tuple[str, str | None, str]]
    """(run_id, status shown or None when not listed, final status its recorded turn gives)."""


@dataclass
class Result:
    settings: Settings
    checker: Checker
    stories: list[Story]
    published: int
    load_s: float
    elapsed_s: float
    operator_present: bool
    operator_acts: dict[str, int]
    dead_letters_watched: bool
    interrupted: bool
    warnings: list[str]
    judgement: Judgement | None = None
    """None: interrupted, or no reconciliation service answers."""
    prefix: str = ""
    """The run ids' prefix (`<prefix>-<runner_id>-<n>`), also the harness versions' build metadata."""

    @property
    def ok(self) -> bool:
        return not self.checker.contradictions
