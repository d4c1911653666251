"""`continuity up` stops on SIGINT or SIGTERM whenever the signal lands: its handler runs in the
main thread, which may at that moment hold the stop event's own lock (inside `stop.wait`, which
it loops on). Setting the event right there would wait for that lock forever."""

from __future__ import annotations

import signal
import threading

from continuity.devstack.up import stop_handler


def test_a_signal_landing_while_the_stop_event_is_held_still_stops_up() -> None:
    stop = threading.Event()
    handler = stop_handler(stop)
    returned = threading.Event()

    def main_thread_inside_wait() -> None:
        # What the main thread holds between two bytecodes of `Event.wait` (private, on purpose:
        # it is the lock `Event.set` takes).
        with stop._cond:  # type: ignore[attr-defined]
            handler(signal.SIGTERM, None)
            returned.set()

    threading.Thread(target=main_thread_inside_wait, daemon=True).start()
    assert returned.wait(5), "the handler did not return: it waited for the lock its own thread holds"
    assert stop.wait(5), "the stop event was never set"
