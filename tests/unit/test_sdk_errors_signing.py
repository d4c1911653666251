"""The SDK's error classes by contract code (the Python SDK's and the TypeScript SDK's, against
the services' catalogue), its signatures as the services verify them, and its option checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from continuity_runner import (
    ClaimRefused,
    Conflict,
    ContinuityError,
    InternalError,
    InvalidRequest,
    NotFound,
    RevisionConflict,
    RunnerNotIssued,
    RunnerOptions,
    SessionHeld,
    SessionNotOwned,
    StaleEpoch,
    Unavailable,
)
from continuity_runner.errors import error_class, error_from_reply
from continuity_runner.signing import sign_command_result

from shared.contract import CommandResult
from shared.contract.errors import CATALOGUE
from shared.contract.signing import Verdict, verify

TS_ERRORS = Path(__file__).resolve().parents[2] / "sdk" / "typescript" / "src" / "errors.ts"


def reply(status: int, code: str, message: str = "sanitized") -> ContinuityError:
    body = f'{{"error": {{"code": "{code}", "message": "{message}"}}}}'.encode()
    err = error_from_reply(body, {"Nats-Service-Error-Code": str(status), "Nats-Service-Error": message})
    assert err is not None
    return err


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "malformed_json", InvalidRequest),
        (400, "missing_field", InvalidRequest),
        (400, "invalid_field", InvalidRequest),
        (404, "not_found", NotFound),
        (409, "revision_conflict", RevisionConflict),
        (409, "stale_epoch", StaleEpoch),
        (409, "session_held", SessionHeld),
        (409, "session_not_owned", SessionNotOwned),
        (409, "claim_refused", ClaimRefused),
        (409, "runner_not_issued", RunnerNotIssued),
        (500, "internal_error", InternalError),
        (503, "unavailable", Unavailable),
    ],
)
def test_each_code_has_its_class(status: int, code: str, cls: type[ContinuityError]) -> None:
    err = reply(status, code)
    assert type(err) is cls
    assert (err.status, err.code, err.message) == (status, code, "sanitized")


@pytest.mark.parametrize("code", sorted(CATALOGUE))
def test_every_code_the_services_answer_is_typed_in_the_python_sdk(code: str) -> None:
    """A conflict has a class of its own (the runner must tell them apart); any other code at
    least the class of its status."""
    entry = CATALOGUE[code]
    cls = error_class(entry.status, code)
    assert cls.status == entry.status
    if entry.status == 409:
        assert cls.code == code and issubclass(cls, Conflict)


def _ts_classes_by_code() -> dict[str, str]:
    source = TS_ERRORS.read_text()
    table = re.search(r"const BY_CODE[^{]*\{(?P<body>.*?)\};", source, re.DOTALL)
    assert table is not None
    return dict(re.findall(r"^\s*(\w+): (\w+),", table["body"], re.MULTILINE))


def _ts_conflicts() -> set[str]:
    return set(re.findall(r"export class (\w+) extends Conflict\b", TS_ERRORS.read_text()))


@pytest.mark.parametrize("code", sorted(c for c, e in CATALOGUE.items() if e.status == 409))
def test_every_conflict_the_services_answer_is_typed_in_the_typescript_sdk(code: str) -> None:
    assert _ts_classes_by_code().get(code) in _ts_conflicts(), code


def test_an_unknown_code_falls_back_to_its_status() -> None:
    err = reply(409, "some_new_conflict")
    assert type(err) is Conflict and err.code == "some_new_conflict"
    assert type(reply(418, "teapot")) is ContinuityError


def test_a_success_is_no_error_and_a_bad_body_keeps_the_status() -> None:
    assert error_from_reply(b'{"cleared": true}', None) is None
    err = error_from_reply(b"not json", {"Nats-Service-Error-Code": "503", "Nats-Service-Error": "down"})
    assert isinstance(err, Unavailable) and err.message == "down"


def _as_server(result: object) -> CommandResult:
    import msgspec

    return msgspec.json.decode(msgspec.json.encode(result), type=CommandResult)


def test_the_sdks_signature_verifies_with_the_services_code() -> None:
    keys = {"k1": b"a key of the runner"}
    signed = sign_command_result("k1", keys["k1"], "runner-a", "run-1", 2, "provider.attach", "refused", "x")
    assert verify(keys, "runner-a", "run-1", 2, _as_server(signed)) is Verdict.VALID
    # Bound to the runner, the run and the attempt, and to the key.
    assert verify(keys, "runner-b", "run-1", 2, _as_server(signed)) is Verdict.SIGNATURE_INVALID
    assert verify(keys, "runner-a", "run-1", 3, _as_server(signed)) is Verdict.SIGNATURE_INVALID
    assert verify({"k1": b"another"}, "runner-a", "run-1", 2, _as_server(signed)) is Verdict.SIGNATURE_INVALID


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"runner_id": "runner.a"}, "runner_id"),
        ({"runner_id": "r" * 65}, "runner_id"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"request_timeout": -1.0}, "request_timeout"),
        ({"publish_attempts": 0}, "publish_attempts"),
        ({"signing_keys": {"k 1": b"x"}}, "signing_keys"),
        ({"signing_keys": {"k1": b"x"}, "signing_key_id": "k2"}, "signing_key_id"),
        ({"tls_cert": "/c.pem"}, "tls_cert"),
    ],
)
def test_an_option_that_cannot_be_used_is_an_invalid_request_naming_it(
    options: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        RunnerOptions(**{"runner_id": "r", **options})  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.field) == ("invalid_field", field)
    assert isinstance(refused.value, ValueError)  # what Python raises for a bad argument


def test_options_are_checked() -> None:
    options = RunnerOptions(runner_id="r", servers=" nats://a:4222, nats://b:4222 ", password="hunter2")
    assert options.server_list == ["nats://a:4222", "nats://b:4222"]
    assert options.effective_inbox_prefix == "_INBOX.r"
    assert "hunter2" not in repr(options)
    with pytest.raises(InvalidRequest, match="several") as several:
        RunnerOptions(runner_id="r", signing_keys={"k1": b"x", "k2": b"y"}).signing_key()
    assert several.value.field == "signing_key_id"
    assert options.connect_timeout == 5.0  # the documented default
    # Each of the two servers gets half of the bound for its attempt.
    assert options.nats_options()["connect_timeout"] == 2.5


def test_tls_is_on_with_a_tls_url_or_a_tls_option_and_starts_first() -> None:
    import ssl

    plain = RunnerOptions(runner_id="r", servers="nats://a:4222").nats_options()
    assert "tls" not in plain and "tls_handshake_first" not in plain
    by_url = RunnerOptions(runner_id="r", servers="tls://a:4222").nats_options()
    assert isinstance(by_url["tls"], ssl.SSLContext) and by_url["tls_handshake_first"] is True
    assert by_url["tls"].verify_mode == ssl.CERT_REQUIRED and by_url["tls"].check_hostname
    prepared = ssl.create_default_context()
    given = RunnerOptions(runner_id="r", tls_context=prepared, tls_handshake_first=False).nats_options()
    assert given["tls"] is prepared and given["tls_handshake_first"] is False
    seeded = RunnerOptions(runner_id="r", nkey_seed_file="/run/r.nk").nats_options()
    assert seeded["nkeys_seed"] == "/run/r.nk" and seeded["inbox_prefix"] == "_INBOX.r"
