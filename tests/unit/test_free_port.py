"""Ports for the servers the tests and `continuity up` start are chosen below the kernel's
ephemeral range: a port of that range can become an outgoing connection's source port before the
server binds it (a cluster node once stopped with `address already in use` on its route port)."""

from __future__ import annotations

import socket

from continuity.devstack import servers


def test_a_free_port_is_chosen_below_the_ephemeral_range_and_is_bindable() -> None:
    low = servers._ephemeral_low()
    assert low is not None
    ports = {servers.free_port() for _ in range(50)}
    assert all(servers.LOWEST_PORT <= p < low for p in ports), sorted(ports)
    assert len(ports) > 1
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_chosen() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        assert not servers._bindable(taken)
