"""`continuity up --demo`: a small fleet against the local stack, narrated for a newcomer.

Each time a run ends along a path no run took before, the path is printed at once; at the end
come every path with its count, and the tables of `continuity simulate`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading

from continuity.devstack.stack import Stack
from continuity.tools.simulate.fleet import Fleet, FleetError
from continuity.tools.simulate.keys import DEMO_KEYS, DEMO_KEYS_ENV
from continuity.tools.simulate.report import demo_stories, final_report, fit, progress_line
from continuity.tools.simulate.result import Settings
from continuity.tools.simulate.runner import Story
from continuity.tools.simulate.scenarios import SCENARIOS

ARCHIVE_TIMEOUT_S = 2.0
RETRY_BACKOFF_S = 0.2


def environment() -> dict[str, str]:
    return {
        "CONTINUITY_RUNNER_KEYS": DEMO_KEYS_ENV,
        "CONTINUITY_ARCHIVE_TIMEOUT_S": str(ARCHIVE_TIMEOUT_S),
        "CONTINUITY_RETRY_BACKOFF_S": str(RETRY_BACKOFF_S),
    }


def settings(nats_url: str, seconds: float) -> Settings:
    return Settings(
        runners=4,
        events=None,
        seconds=seconds,
        rate=8.0,
        archive_fail_rate=0.15,
        archive_timeout_rate=0.1,
        nats_url=nats_url,
        keys=dict(DEMO_KEYS),
        deadline_s=15.0,
        archive_timeout_s=ARCHIVE_TIMEOUT_S,
    )


def run(stack: Stack, seconds: float, stop: threading.Event) -> int:
    return asyncio.run(_run(settings(stack.nats_url, seconds), stop))


async def _run(s: Settings, stop: threading.Event) -> int:
    intro = (
        f"Demo: {s.runners} simulated runners fail resumes in {len(s.mix)} ways for {s.seconds:.0f}s "
        f"(archive timeout {ARCHIVE_TIMEOUT_S:.0f}s, retry backoff {RETRY_BACKOFF_S}s)."
    )
    print(f"\n{fit(intro)}\nEvery new path a run takes through Continuity is shown as it ends:", flush=True)
    seen: set[str] = set()

    def on_story(story: Story) -> None:
        if story.path not in seen:
            seen.add(story.path)
            print(fit(f"  [{SCENARIOS[story.scenario].name:<12}] {story.path}", " " * 17), flush=True)

    def progress(elapsed: float, fleet: Fleet) -> None:
        if round(elapsed) % 5 == 0:
            print(progress_line(elapsed, fleet.published, fleet.checker), file=sys.stderr, flush=True)

    stopped = asyncio.Event()
    watcher = asyncio.create_task(_bridge(stop, stopped))
    try:
        result = await Fleet(s).run(stopped, progress=progress, on_story=on_story)
    except FleetError as err:
        print(f"demo: {err}", file=sys.stderr)
        return 4
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    print()
    print(demo_stories(result))
    print()
    print(final_report(result), flush=True)
    return 0 if result.ok else 1


async def _bridge(stop: threading.Event, stopped: asyncio.Event) -> None:
    """Ctrl-C sets a thread event in `continuity up`; the fleet waits on an asyncio one."""
    while not await asyncio.to_thread(stop.wait, 0.2):
        pass
    stopped.set()
