"""How the CLI tells what NATS refused from what nats-py reports (continuity.cli.refusals)."""

from __future__ import annotations

import nats.errors

from continuity.cli.refusals import is_authentication_failure, permission_denial


def test_authentication_failures_as_nats_py_reports_them() -> None:
    assert is_authentication_failure(nats.errors.Error("nats: 'Authorization Violation'"))
    assert is_authentication_failure(nats.errors.Error("nats: 'authorization violation'"))
    assert is_authentication_failure(nats.errors.AuthorizationError())
    assert is_authentication_failure(nats.errors.Error("nats: 'user authentication expired'"))
    assert not is_authentication_failure(ConnectionRefusedError(111, "Connect call failed"))
    assert not is_authentication_failure(nats.errors.NoServersError())
    denied = nats.errors.Error('nats: permissions violation for publish to "continuity.runs.get"')
    assert not is_authentication_failure(denied)


def test_permission_denials_name_the_refused_operation() -> None:
    publish = nats.errors.Error('nats: permissions violation for publish to "continuity.runs.get"')
    assert permission_denial(publish) == "publish to continuity.runs.get"
    inbox = nats.errors.Error('nats: permissions violation for subscription to "_inbox.abcdef.*"')
    assert (
        permission_denial(inbox)
        == "subscribe to its reply inbox (below _INBOX.operator, or CONTINUITY_NATS_INBOX_PREFIX)"
    )
    other = nats.errors.Error('nats: permissions violation for subscription to "continuity.x.>"')
    assert permission_denial(other) == "subscribe to continuity.x.>"
    assert permission_denial(nats.errors.Error("nats: 'Authorization Violation'")) is None
    assert permission_denial(nats.errors.TimeoutError()) is None


def test_a_hostile_subject_in_the_servers_text_is_not_repeated_as_is() -> None:
    odd = nats.errors.Error('nats: permissions violation for publish to "a\x1b[31mb\u00e9' + "x" * 300 + '"')
    shown = permission_denial(odd)
    assert shown is not None and shown.startswith("publish to a?")
    assert "\x1b" not in shown and len(shown) <= len("publish to ") + 128
