"""CONTINUITY_DRAIN_TIMEOUT_S bounds a service's whole drain: its parts share one budget, so a
grace period set from it (Kubernetes' terminationGracePeriodSeconds) is not outrun by a service
of many parts, and a part that uses the time up still lets the ones after it be told to stop."""

from __future__ import annotations

import asyncio

import pytest

from services.classifier.service import SPEC
from shared.platform.service import Service

pytestmark = pytest.mark.asyncio


class Stuck:
    """A part whose drain never finishes by itself: it takes all the time it is given."""

    def __init__(self) -> None:
        self.given: float | None = None

    async def start(self) -> None:
        return None

    async def drain(self, timeout: float) -> None:
        self.given = timeout
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), timeout)

    def ready(self) -> bool:
        return True


async def test_the_parts_of_a_service_share_one_drain_budget() -> None:
    parts = [Stuck(), Stuck(), Stuck()]
    service = Service(SPEC, build=lambda ctx: None)  # type: ignore[arg-type, return-value]
    service.parts = list(parts)
    await service.drain(0.3)
    given = [part.given for part in parts]
    assert all(g is not None for g in given), given  # each was told to stop, the last included
    assert sum(g for g in given if g is not None) <= 0.3, given
    assert given[0] is not None and given[0] > 0.25, given  # the first had (nearly) all of it
