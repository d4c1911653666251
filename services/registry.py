"""The services `continuity serve` and `continuity up` know, by name: every package under
services/ with a `service.py`. A package's name is its service's name with `_` for `-`
(`services/session_store` is `session-store`); its `service.py` exports `NAME`, `SPEC` (the
endpoints and durable consumers it owns) and `build(ctx, **options) -> Wiring`
(shared/platform/service.py). Adding a package adds the service here, to `continuity serve`,
`continuity up`, `continuity streams` and to the deploy tests.

Which service owns which subject and consumer is read here from the specs, by the command and
the tests, never listed again."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import pkgutil
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from nats.js.api import StreamConfig

import services
from shared.platform import config
from shared.platform.bus.streams import DurableConsumer
from shared.platform.config import VARIABLE_PREFIX, Config, config_variables
from shared.platform.service import Service, ServiceSpec


def _discover() -> dict[str, str]:
    found = {}
    for package in sorted(pkgutil.iter_modules(services.__path__), key=lambda m: m.name):
        module = f"services.{package.name}.service"
        if package.ispkg and importlib.util.find_spec(module) is not None:
            found[package.name.replace("_", "-")] = module
    return found


SERVICES: dict[str, str] = _discover()
"""Service name -> the module that describes it."""


def available() -> list[str]:
    """Services whose package is present in this build."""
    return list(SERVICES)


def _module(name: str) -> ModuleType:
    if name not in SERVICES:
        raise KeyError(f"unknown service {name!r}; known: {', '.join(SERVICES)}")
    module = importlib.import_module(SERVICES[name])
    if module.NAME != name or module.SPEC.name != name:
        raise KeyError(f"{SERVICES[name]} describes {module.SPEC.name!r}, not {name!r}")
    return module


def spec(name: str) -> ServiceSpec:
    """A service's spec, read without connecting to anything."""
    found: ServiceSpec = _module(name).SPEC
    return found


def specs() -> list[ServiceSpec]:
    """Every service's spec, by name."""
    return [spec(name) for name in SERVICES]


def load(name: str, **options: Any) -> Service:
    """The service `continuity serve <name>` runs; `options` go to its `build` (intervals a test
    shortens, the console's own configuration)."""
    return Service.of(_module(name), **options)


def durable_consumers(replicas: int, ack_wait_s: float) -> list[DurableConsumer]:
    """Every service's durable consumers as JetStream should store them (`continuity streams`)."""
    return [c.stored(replicas, ack_wait_s) for s in specs() for c in s.consumers]


def own_streams(config: Config) -> list[StreamConfig]:
    """The streams services create besides the contract's four (their specs' `streams`), as
    `config` wants them (`continuity streams`)."""
    return [make(config) for s in specs() for make in s.streams]


def service_answering(subject: str) -> str | None:
    """The service whose endpoints take requests on `subject` (None when none does)."""
    return next((s.name for s in specs() if s.answers(subject)), None)


@functools.cache
def known_variables() -> frozenset[str]:
    """Every CONTINUITY_* variable some part of Continuity reads: the shared `Config`'s and each
    service's own settings (its spec's `VARIABLES`, when it has some)."""
    declared: list[frozenset[str]] = [
        getattr(importlib.import_module(m), "VARIABLES", frozenset()) for m in SERVICES.values()
    ]
    return config_variables().union(*declared)


def unknown_variables(env: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """Each CONTINUITY_* variable of `env` (the process's own by default) that nothing reads, with
    the known name closest to it (None when none is close), sorted by name."""
    env = os.environ if env is None else env
    if not any(n.startswith(VARIABLE_PREFIX) for n in env):
        return []  # nothing to check: the services' specs are not even loaded
    return config.unknown_variables(env, known_variables())
