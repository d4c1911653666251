"""Simulated runners that speak the contract, and check what Continuity answers.

`continuity simulate` runs a fleet against any stack; `continuity up --demo` starts the
services with `demo_environment()` and then calls `run_demo`.
"""

from __future__ import annotations

import argparse
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from continuity.devstack.stack import Stack


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from continuity.tools.simulate.command import register as add_command

    add_command(sub)


def demo_environment() -> dict[str, str]:
    """The services' environment for the demo: the demo keys, and short waits so that a
    timed-out archive and a retry's backoff show within seconds."""
    from continuity.tools.simulate.demo import environment

    return environment()


def run_demo(stack: Stack, seconds: float, stop: threading.Event) -> int:
    """Run the fleet and the operator against `stack`, narrate, and return the exit code."""
    from continuity.tools.simulate.demo import run

    return run(stack, seconds, stop)
