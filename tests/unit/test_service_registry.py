"""The one list of services: every package under services/ with a `service.py`, whose `NAME`
is the package's name with `-` for `_`; the CLI and the deploy tests read it."""

from __future__ import annotations

import importlib
from pathlib import Path

from services import registry
from shared.platform.service import ServiceApp
from tests.deploy.conftest import SERVICES as DEPLOYED

SERVICES_DIR = Path(__file__).resolve().parents[2] / "services"


def test_the_registry_is_the_service_packages() -> None:
    packages = {p.parent.name.replace("_", "-") for p in SERVICES_DIR.glob("*/service.py")}
    assert set(registry.SERVICES) == packages
    assert {"session-store", "classifier", "archiver", "reconciliation"} <= packages


def test_each_service_module_names_itself_and_builds_a_spec() -> None:
    for name, module_name in registry.SERVICES.items():
        module = importlib.import_module(module_name)
        assert module.NAME == name
        if name == "console":  # a web server, not consumers and endpoints: it exports app()
            assert callable(module.app) and not hasattr(module, "build")
            continue  # loading it reads its sign-in settings: tests/integration/console run it
        assert callable(module.build)
        app = registry.load(name)
        assert isinstance(app, ServiceApp) and app.name == name


def test_the_deploy_tests_take_the_same_list() -> None:
    assert DEPLOYED == tuple(registry.SERVICES)
