"""The services `continuity serve` and `continuity up` know, by name: every package under
services/ with a `service.py`. A package's name is its service's name with `_` for `-`
(`services/session_store` is `session-store`); its `service.py` exports `NAME` and
`build(ctx) -> ServiceSpec` (shared/platform/service.py), or, for a process that is neither consumers nor
endpoints (the console's web server), `app() -> App`. Adding a package adds the service here,
to `continuity serve`, `continuity up` and to the deploy tests."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import pkgutil
from collections.abc import Mapping

import services
from shared.platform import config
from shared.platform.config import VARIABLE_PREFIX, config_variables
from shared.platform.runtime import App
from shared.platform.service import ServiceApp


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


def load(name: str) -> App:
    if name not in SERVICES:
        raise KeyError(f"unknown service {name!r}; known: {', '.join(SERVICES)}")
    module = importlib.import_module(SERVICES[name])
    if module.NAME != name:
        raise KeyError(f"{SERVICES[name]} describes {module.NAME!r}, not {name!r}")
    if hasattr(module, "build"):
        return ServiceApp(name, module.build)
    app: App = module.app()
    return app


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
