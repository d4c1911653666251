"""The development login's throttle, as a pure object on a given clock: wrong tokens counted
per client address and in all within a sliding window, in bounded memory."""

from __future__ import annotations

import pytest

from services.console.config import ConsoleConfig
from services.console.identity import LoginThrottle
from shared.platform.config import ConfigError


def test_an_address_is_held_back_after_its_failures_until_the_oldest_leaves_the_window() -> None:
    throttle = LoginThrottle(per_address=3, total=100, window_s=60)
    for at in (0.0, 10.0, 20.0):
        assert throttle.wait_s("10.0.0.1", at) == 0
        throttle.failed("10.0.0.1", at)
    assert throttle.wait_s("10.0.0.1", 30.5) == 30  # the failure at 0 leaves at 60
    assert throttle.wait_s("10.0.0.2", 30.5) == 0  # another address is not held back
    assert throttle.wait_s("10.0.0.1", 60.0) == 0
    throttle.failed("10.0.0.1", 61.0)  # three within the window again: 10, 20, 61
    assert throttle.wait_s("10.0.0.1", 61.0) == 9


def test_failures_from_every_address_together_hold_back_no_one() -> None:
    """The count of all addresses is a storm signal that slows wrong tokens (pages/signin.py),
    never a lock: an address that failed nothing may try at once, whatever the others did."""
    throttle = LoginThrottle(per_address=5, total=4, window_s=10)
    for n in range(4):
        throttle.failed(f"10.0.1.{n}", float(n))
    assert throttle.storm_s(4.0) == 6  # until the first failure leaves the window
    assert throttle.wait_s("10.0.9.9", 4.0) == 0  # a new address is not held back
    assert throttle.storm_s(10.0) == 0
    for _ in range(50):  # a storm from one address holds back that address only
        throttle.failed("10.6.6.6", 11.0)
    assert throttle.wait_s("10.6.6.6", 11.0) == 10 and throttle.wait_s("10.0.9.9", 11.0) == 0


def test_memory_is_bounded_whatever_the_number_of_addresses() -> None:
    throttle = LoginThrottle(per_address=3, total=50, window_s=60, max_addresses=100)
    for n in range(10_000):
        throttle.failed(f"addr-{n}", n / 1000)
    assert throttle.addresses == 100
    throttle.failed("late", 1000.0)  # every earlier failure left the window: all forgotten
    assert throttle.addresses == 1
    default = LoginThrottle(per_address=3, total=50, window_s=60)
    for n in range(5000):
        default.failed(f"addr-{n}", 0.0)
    assert default.addresses == 4096
    oldest_first = LoginThrottle(per_address=1, total=50, window_s=60, max_addresses=2)
    for at, address in enumerate(("a", "b", "c")):
        oldest_first.failed(address, float(at))
    assert [oldest_first.wait_s(a, 3.0) for a in ("a", "b", "c")] == [0, 58, 59]  # `a` forgotten


def test_the_throttles_settings_come_from_the_environment() -> None:
    base = {"CONTINUITY_CONSOLE_DEV_TOKEN": "t" * 16}
    config = ConsoleConfig.from_env(base)
    assert (config.login_failures, config.login_failures_total, config.login_window_s) == (5, 50, 60)
    config = ConsoleConfig.from_env(
        {
            **base,
            "CONTINUITY_CONSOLE_LOGIN_FAILURES": "3",
            "CONTINUITY_CONSOLE_LOGIN_FAILURES_TOTAL": "30",
            "CONTINUITY_CONSOLE_LOGIN_WINDOW_S": "120",
        }
    )
    assert (config.login_failures, config.login_failures_total, config.login_window_s) == (3, 30, 120)
    with pytest.raises(ConfigError, match="CONTINUITY_CONSOLE_LOGIN_WINDOW_S"):
        ConsoleConfig.from_env({**base, "CONTINUITY_CONSOLE_LOGIN_WINDOW_S": "0"})
