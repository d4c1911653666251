"""The demo's runner keys: public, fixed, and good for nothing but a local simulation.

The services verify command results with `CONTINUITY_RUNNER_KEYS`; the simulated runners sign
with the same keys, so both sides must be started with the same value (`demo_environment`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

from shared.platform.config import parse_runner_keys

DEMO_KEYS: dict[str, bytes] = {
    "sim-k1": b"continuity-demo-runner-key-1-not-a-secret",
    "sim-k2": b"continuity-demo-runner-key-2-not-a-secret",
}

UNKNOWN_KEY_ID = "sim-retired"
"""A key id no service knows: a command result under it must be quarantined (`unknown_key`)."""


def keys_env(keys: Mapping[str, bytes]) -> str:
    """The `CONTINUITY_RUNNER_KEYS` value of `keys`."""
    return ",".join(f"{key_id}={base64.b64encode(secret).decode()}" for key_id, secret in keys.items())


def parse_keys(raw: str) -> dict[str, bytes]:
    """`k1=<base64>,...` as the services parse it; raises `shared.platform.config.ConfigError`."""
    keys = parse_runner_keys(raw)
    if not keys:
        raise ValueError("no runner keys given")
    return keys


DEMO_KEYS_ENV = keys_env(DEMO_KEYS)
