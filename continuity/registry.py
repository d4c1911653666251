"""The services `continuity serve` and `continuity up` know, by name."""

from __future__ import annotations

import importlib
import importlib.util

from shared.runtime import App

SERVICES: dict[str, str] = {
    "session-store": "services.session_store.service:SessionStoreApp",
    "classifier": "services.classifier.service:ClassifierApp",
    "archiver": "services.archiver.service:ArchiverApp",
    "reconciliation": "services.reconciliation.service:ReconciliationApp",
    "console": "services.console.service:ConsoleApp",
}


def available() -> list[str]:
    """Services whose package is present in this build."""
    names = []
    for name, target in SERVICES.items():
        module = target.partition(":")[0]
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # its parent package is not there either
            found = False
        if found:
            names.append(name)
    return names


def load(name: str) -> App:
    if name not in SERVICES:
        raise KeyError(f"unknown service {name!r}; known: {', '.join(SERVICES)}")
    module_name, _, attr = SERVICES[name].partition(":")
    app: App = getattr(importlib.import_module(module_name), attr)()
    return app
