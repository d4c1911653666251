"""A runner's publication of an event: retried with the same `Nats-Msg-Id` when JetStream does
not confirm it (a NATS restart, a leader election), a bounded number of times within a bounded
time. A first attempt that was stored but whose acknowledgement was lost is then dropped by the
stream's duplicate window, so the event is still decided once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import BadRequestError

from shared.bus.publish import publish

ATTEMPTS = 6
WITHIN_S = 30.0
ATTEMPT_TIMEOUT_S = 5.0


class PublishFailed(Exception):
    """No attempt was confirmed; `attempts` were made."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"not confirmed after {attempts} attempts ({type(last).__name__})")
        self.attempts = attempts
        self.last = last


async def publish_retried(
    js: JetStreamContext,
    subject: str,
    payload: bytes,
    msg_id: str,
    *,
    attempts: int = ATTEMPTS,
    within_s: float = WITHIN_S,
    attempt_timeout_s: float = ATTEMPT_TIMEOUT_S,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> int:
    """Publish until JetStream confirms; returns how many attempts it took."""
    deadline = time.monotonic() + within_s
    delay = 0.1
    for attempt in range(1, attempts + 1):
        left = deadline - time.monotonic()
        try:
            await publish(js, subject, payload, msg_id, timeout=max(0.1, min(attempt_timeout_s, left)))
            return attempt
        except BadRequestError:
            raise  # the stream refuses this message: sending it again cannot help
        except (nats.errors.Error, TimeoutError, OSError) as exc:
            left = deadline - time.monotonic()
            if attempt == attempts or left <= delay:
                raise PublishFailed(attempt, exc) from None
            if on_retry is not None:
                on_retry(attempt, exc)
            await asyncio.sleep(delay)  # back off before the next attempt
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")  # the loop returns or raises
