"""The one list of services: every package under services/ with a `service.py`, whose `NAME`
is the package's name with `-` for `_`; the CLI and the deploy tests read it, and which service
owns which subject and consumer is read from the services' specs."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from services import registry
from shared.contract import subjects
from shared.platform.service import (
    ConsumerSpec,
    EndpointSpec,
    Service,
    ServiceSpec,
    Wiring,
    check_handlers,
    subject_matches,
)
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
        assert isinstance(module.SPEC, ServiceSpec) and module.SPEC.name == name
        assert callable(module.build)
        if name == "console":
            continue  # loading it reads its sign-in settings: tests/integration/console run it
        service = registry.load(name)
        assert isinstance(service, Service) and service.name == name


def test_the_deploy_tests_take_the_same_list() -> None:
    assert DEPLOYED == tuple(registry.SERVICES)


def test_the_durable_consumers_are_the_specs_consumers() -> None:
    found = {(c.stream, c.durable, c.config.filter_subject) for c in registry.durable_consumers(1, 30.0)}
    assert found == {
        (subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER, subjects.EVENTS_ALL),
        (subjects.WORK_STREAM, subjects.ARCHIVER_CONSUMER, subjects.WORK_ARCHIVE),
        (subjects.WORK_STREAM, subjects.RECONCILIATION_CONSUMER, subjects.WORK_RECONCILE),
        (subjects.DECISIONS_STREAM, subjects.RUNS_INDEX_CONSUMER, subjects.DECISIONS_ALL),
    }


def test_a_request_subject_names_the_service_that_answers_it() -> None:
    assert registry.service_answering(subjects.SESSIONS_DECIDE) == "session-store"
    assert registry.service_answering(subjects.runner_sessions("r-1", "get")) == "session-store"
    assert registry.service_answering(subjects.RUNS_LIST) == "reconciliation"
    assert registry.service_answering("continuity.nothing.here") is None


def test_subjects_match_as_nats_matches_them() -> None:
    assert subject_matches("a.*.c", "a.b.c")
    assert not subject_matches("a.*.c", "a.b.c.d")
    assert not subject_matches("a.*", "a")
    assert subject_matches("a.>", "a.b.c")
    assert not subject_matches("a.>", "a")
    assert not subject_matches("a.b", "a.c")


_GET = EndpointSpec("things-get", "test.things.get", dict, dict)
_PUT = EndpointSpec("things-put", "test.things.put", dict, dict)
_FEED = ConsumerSpec("TEST", "things-feed", "test.feed.>", dict)
_TWO = ServiceSpec(name="things", version="1.0.0", description="test", endpoints=(_GET,), consumers=(_FEED,))


async def _handler(request: object) -> None:
    return None


async def test_a_service_with_a_spec_left_without_handler_does_not_start() -> None:
    service = Service(_TWO, build=lambda ctx: Wiring(handlers={_GET: _handler}))
    with pytest.raises(ValueError, match=r"^service 'things': no handler for things-feed$"):
        await service.start(None)  # type: ignore[arg-type]  # refused before any connection
    assert not service.parts


async def test_a_service_with_a_handler_its_spec_does_not_list_does_not_start() -> None:
    handlers = {_GET: _handler, _FEED: _handler, _PUT: _handler}
    service = Service(_TWO, build=lambda ctx: Wiring(handlers=handlers))
    with pytest.raises(ValueError, match=r"a handler for things-put, which its SPEC does not list$"):
        await service.start(None)  # type: ignore[arg-type]
    assert not service.parts


def test_a_spec_is_a_handlers_key_whatever_it_is_named() -> None:
    # The same name under another subject is another spec: the key is the spec, not its name.
    other = EndpointSpec("things-get", "test.other.get", dict, dict)
    with pytest.raises(ValueError, match="no handler for things-get; a handler for things-get"):
        check_handlers(_TWO, Wiring(handlers={other: _handler, _FEED: _handler}))
    check_handlers(_TWO, Wiring(handlers={_GET: _handler, _FEED: _handler}))
