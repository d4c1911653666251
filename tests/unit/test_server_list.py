"""NATS_URL is one URL or a comma-separated list; every command and service splits it alike."""

from __future__ import annotations

from shared.platform.bus.connection import server_list


def test_a_single_url_is_a_list_of_one() -> None:
    assert server_list("nats://127.0.0.1:4222") == ["nats://127.0.0.1:4222"]


def test_a_list_is_split_on_commas_with_blanks_and_empty_items_dropped() -> None:
    assert server_list(" nats://a:4222, nats://user:pw@b:4222,,nats://c:4222 ,") == [
        "nats://a:4222",
        "nats://user:pw@b:4222",
        "nats://c:4222",
    ]
