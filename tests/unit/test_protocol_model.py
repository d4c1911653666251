"""The recording protocol's model (spec/protocol.pml, docs/protocol.md), checked by spin through
spec/check.sh: the intact model passes an exhaustive search at both bounds, and the model with
any one guard removed produces a counterexample of the invariant that guard keeps.

Every check compiles its own checker, so they run side by side, one per core, started when the
first test asks for a result.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"
CHECK = SPEC / "check.sh"
MODEL = SPEC / "protocol.pml"
DOC = ROOT / "docs" / "protocol.md"
BOUNDS = ("one", "two")

pytestmark = pytest.mark.skipif(
    shutil.which("spin") is None or shutil.which("gcc") is None,
    reason="spin or gcc is not installed (`make tools` installs both)",
)


@dataclass(frozen=True)
class Guard:
    name: str
    """The model's switch that removes it (`-D<name>`)."""
    bound: str
    """The bound at which its removal is caught."""
    assertion_names: str
    """A name in the assertion that its removal must violate."""


def guards() -> list[Guard]:
    """The guards as spec/check.sh lists them (its GUARDS block, read without running it)."""
    block = re.search(r'^GUARDS="\n(.*?)^"', CHECK.read_text(), re.S | re.M)
    assert block is not None, "spec/check.sh has no GUARDS block"
    return [Guard(*line.split()) for line in block.group(1).splitlines() if line.strip()]


@dataclass(frozen=True)
class Verdict:
    output: str

    @property
    def errors(self) -> int:
        found = re.search(r"errors: (\d+)", self.output)
        assert found is not None, f"pan gave no verdict:\n{self.output[-3000:]}"
        return int(found.group(1))

    @property
    def states(self) -> int:
        found = re.search(r"^\s*(\d+) states, stored", self.output, re.M)
        assert found is not None, f"pan counted no states:\n{self.output[-3000:]}"
        return int(found.group(1))

    @property
    def complete(self) -> bool:
        """No truncation: neither the depth bound nor the memory bound cut the search short."""
        cut = ("search depth too small", "Search not completed", "MEMLIM")
        return not any(text in self.output for text in cut)

    @property
    def violated(self) -> str:
        found = re.search(r"assertion violated (.*)|(invalid end state.*)", self.output)
        return (found.group(0) if found else "").strip()


def _check(bound: str, guard: str | None) -> Verdict:
    args = [str(CHECK), "run", bound, *([guard] if guard else [])]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    return Verdict(done.stdout + done.stderr)


@cache
def _started() -> dict[tuple[str, str | None], Future[Verdict]]:
    """Every check, started at once on a pool as wide as the machine (the slowest first)."""
    pool = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1))
    runs: list[tuple[str, str | None]] = [(bound, None) for bound in BOUNDS]
    runs += [(g.bound, g.name) for g in guards()]
    return {run: pool.submit(_check, *run) for run in runs}


def result(bound: str, guard: str | None = None) -> Verdict:
    return _started()[(bound, guard)].result(timeout=300)


@pytest.mark.parametrize("bound", BOUNDS)
def test_the_intact_model_has_no_counterexample_in_a_complete_search(bound: str) -> None:
    verdict = result(bound)
    assert verdict.errors == 0, verdict.output[-3000:]
    assert verdict.complete, verdict.output[-3000:]
    assert verdict.states > 100_000, "the model explored next to nothing: a modelling error"


@pytest.mark.parametrize("guard", guards(), ids=lambda g: g.name)
def test_removing_a_guard_gives_a_counterexample_of_its_invariant(guard: Guard) -> None:
    verdict = result(guard.bound, guard.name)
    assert verdict.errors >= 1, f"{guard.name} removed and nothing fails:\n{verdict.output[-3000:]}"
    assert guard.assertion_names in verdict.violated, (
        f"{guard.name} removed breaks another assertion than the one on "
        f"{guard.assertion_names}: {verdict.violated}"
    )


def test_every_switch_of_the_model_is_a_listed_guard_and_documented() -> None:
    text = MODEL.read_text()
    switches = set(re.findall(r"^#if(?:n)?def (NO_[A-Z_]+)", text, re.M))
    listed = {g.name for g in guards()}
    assert switches == listed
    header = text.split("*/", 1)[0]
    doc = DOC.read_text()
    for name in listed:
        assert f"  {name} " in header, f"{name} is not described in the model's header"
        assert f"`{name}`" in doc, f"{name} is not in docs/protocol.md"
