"""Replies on the bus: every user of CONTINUITY has an inbox prefix of its own (`_INBOX.<user>`)
under deploy/nats/auth.conf, and the services, the console and the `continuity` command connect
with it.

Replayed against a nats-server running the shipped authorization, with the four services
running as their users: no user can subscribe to another's inbox (the reported reading of the
operator's `continuity.runs.list` reply by every service user), and a user may publish into
another's inbox only where it answers that user's requests."""

from __future__ import annotations

import itertools

import pytest
from nats.aio.msg import Msg

from continuity.cli import connect as cli_connect
from shared.contract.client import ContinuityClient
from shared.contract.runs import RunsListRequest
from shared.platform.config import Config, ConfigError
from tests.deploy.conftest import SERVICE_USERS, Stack, inbox
from tests.security.conftest import as_user
from tests.support import wait_for
from tests.support.bus import Conn, Opener

USERS = (*SERVICE_USERS, "operator", "console")

ANSWERS: frozenset[tuple[str, str]] = frozenset(
    {(service, "operator") for service in SERVICE_USERS}  # the micro protocol's answers
    | {("session-store", "console"), ("reconciliation", "console")}  # the console's pages
)
"""(who may publish into whose inbox): a service into the inboxes of the users it answers."""


def test_each_process_connects_with_its_own_inbox_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    config = Config.from_env({})
    assert [config.inbox_prefix(u) for u in ("classifier", "console")] == [
        "_INBOX.classifier",
        "_INBOX.console",
    ]
    assert (
        Config.from_env({"CONTINUITY_NATS_INBOX_PREFIX": "_INBOX.blue"}).inbox_prefix("console")
        == "_INBOX.blue"
    )
    for bad in ("_INBOX.>", "_INBOX.*.x", "_INBOX.", "_INBOX..x", "a b"):
        with pytest.raises(ConfigError, match="CONTINUITY_NATS_INBOX_PREFIX"):
            Config.from_env({"CONTINUITY_NATS_INBOX_PREFIX": bad})
    monkeypatch.delenv("CONTINUITY_NATS_INBOX_PREFIX", raising=False)
    monkeypatch.chdir("/")  # no .continuity/env of a checkout
    assert cli_connect.inbox_prefix() == "_INBOX.operator"


async def test_each_user_may_subscribe_below_its_own_inbox_prefix_only(
    services: None, stack: Stack, open_: Opener
) -> None:
    for user in USERS:
        conn = await as_user(open_, stack, user)
        await conn.nc.subscribe(f"{inbox(user)}.>")  # its own: allowed
        refused = ["_INBOX.>", "_INBOX.*.>", ">", *(f"{inbox(other)}.>" for other in USERS if other != user)]
        for subject in refused:
            await conn.nc.subscribe(subject)
        assert len(await conn.violations()) == len(refused), user


async def test_no_user_reads_the_operators_replies(services: None, stack: Stack, open_: Opener) -> None:
    """The reproduction: every other user listening on `_INBOX.>` while the operator lists runs."""
    seen: list[tuple[str, Msg]] = []
    spies: dict[str, Conn] = {}
    for user in USERS:
        if user == "operator":
            continue
        spies[user] = spy = await as_user(open_, stack, user)

        async def collect(msg: Msg, user: str = user) -> None:
            seen.append((user, msg))

        await spy.nc.subscribe("_INBOX.>", cb=collect)
    operator = await as_user(open_, stack, "operator")
    page = await ContinuityClient(operator.nc, timeout=10).runs(RunsListRequest())
    assert page is not None  # answered, into the operator's inbox
    for user, spy in spies.items():
        assert len(await spy.violations()) == 1, user  # delivered before the PONG, if at all
    assert seen == []


async def test_a_user_publishes_into_another_users_inbox_only_to_answer_it(
    services: None, stack: Stack, open_: Opener
) -> None:
    conns = {user: await as_user(open_, stack, user) for user in USERS}
    got: list[tuple[str, bytes]] = []
    for user, conn in conns.items():

        async def trap(msg: Msg, user: str = user) -> None:
            got.append((user, msg.data))

        await conn.nc.subscribe(f"{inbox(user)}.trap", cb=trap)
        await conn.nc.flush()
    for sender, target in itertools.permutations(USERS, 2):
        await conns[sender].nc.publish(f"{inbox(target)}.trap", f"{sender}>{target}".encode())
    for sender, conn in conns.items():
        refused = [t for t in USERS if t != sender and (sender, t) not in ANSWERS]
        assert len(await conn.violations()) == len(refused), sender
    # Each sender's PONG came after the server routed its publications, and a receiver's
    # callback runs in its own task: wait for the allowed ones, sending an allowed one again if
    # it has not arrived (that it was not refused is what the counts above showed; arriving
    # shows that it reached the inbox), then flush once more so that anything more would have
    # arrived too.
    expected = sorted((target, f"{sender}>{target}".encode()) for sender, target in ANSWERS)
    for _ in range(3):
        try:
            await wait_for(lambda: len(got) >= len(ANSWERS), timeout=5, what="the answers allowed")
            break
        except AssertionError:
            for sender, target in ANSWERS:
                if (target, f"{sender}>{target}".encode()) not in got:
                    await conns[sender].nc.publish(f"{inbox(target)}.trap", f"{sender}>{target}".encode())
    for conn in conns.values():
        await conn.nc.flush()
    states = {user: (conn.nc.is_connected, conn.errors[-1:]) for user, conn in conns.items()}
    assert sorted(set(got)) == expected, states
