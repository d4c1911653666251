"""Hash slots, command routing keys, slot tables, error replies and the cluster setting."""

from __future__ import annotations

import pytest
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    ResponseError,
    TryAgainError,
)

from shared.platform.config import Config, ConfigError
from shared.platform.redis.pipeline import _response_error
from shared.platform.redis.slots import SLOTS, command_slot, first_key, key_slot, node_addresses, slot_table
from shared.records import keys


@pytest.mark.parametrize(
    ("key", "slot"),
    [
        ("somekey", 11058),  # the examples of Redis' CLUSTER KEYSLOT documentation
        ("foo{hash_tag}", 2515),
        ("bar{hash_tag}", 2515),
        ("foo", 12182),
        ("123456789", 12739),  # CRC16/XMODEM's check value 0x31C3 modulo 16384
        (b"foo", 12182),
    ],
)
def test_key_slot_matches_known_slots(key: str | bytes, slot: int) -> None:
    assert key_slot(key) == slot


def test_only_the_first_non_empty_hash_tag_counts() -> None:
    assert key_slot("{user1000}.following") == key_slot("user1000")
    assert key_slot("foo{}{bar}") == key_slot(b"foo{}{bar}")  # empty tag: the whole key
    assert key_slot("foo{}{bar}") != key_slot("bar")
    assert key_slot("foo{{bar}}zap") == key_slot("{bar")
    assert key_slot("foo{bar}{zap}") == key_slot("bar")


def test_every_key_of_a_session_shares_its_slot() -> None:
    sk = "acme/conv-1/codex"
    slot = key_slot(keys.session(sk))
    assert {
        key_slot(k)
        for k in (keys.outbox(sk), keys.run(sk, "r1"), keys.run_audit(sk, "r1"), keys.held_archive(sk, "n"))
    } == {slot}


def test_commands_are_routed_by_their_first_key() -> None:
    assert first_key(("HGETALL", "a")) == "a"
    assert first_key(("SET", b"k", "v", "NX", "GET")) == b"k"
    assert first_key(("EVALSHA", "0" * 40, 2, "k1", "k2", "arg")) == "k1"
    assert first_key(("EVAL", "return 1", 0)) is None
    assert first_key(("PING",)) is None and first_key(("CLUSTER", "SLOTS")) is None
    assert command_slot(("evalsha", "x", "1", "{t}a")) == key_slot("t")


def test_slot_table_from_cluster_slots() -> None:
    reply = [
        [0, 5460, [b"127.0.0.1", 7000, b"id0"], [b"127.0.0.1", 7003, b"id3"]],
        [5461, 10922, [b"", 7001, b"id1"]],  # a master announced without a host
    ]
    table = slot_table(reply, ("10.0.0.9", 7005))
    assert len(table) == SLOTS
    assert table[0] == table[5460] == ("127.0.0.1", 7000)
    assert table[5461] == table[10922] == ("10.0.0.9", 7001)
    assert table[10923] is None and table[SLOTS - 1] is None
    assert node_addresses(reply, ("10.0.0.9", 7005)) == [
        ("127.0.0.1", 7000),
        ("10.0.0.9", 7001),
        ("127.0.0.1", 7003),
    ]


def test_error_replies_become_the_exceptions_that_tell_them_apart() -> None:
    moved = _response_error("MOVED 3999 127.0.0.1:6381")
    assert isinstance(moved, MovedError) and (moved.slot_id, moved.host, moved.port) == (
        3999,
        "127.0.0.1",
        6381,
    )
    ask = _response_error("ASK 3999 127.0.0.1:6382")
    assert type(ask) is AskError and ask.port == 6382
    assert isinstance(_response_error("TRYAGAIN Multiple keys request during rehashing"), TryAgainError)
    assert isinstance(_response_error("CLUSTERDOWN The cluster is down"), ClusterDownError)
    assert isinstance(_response_error("LOADING Redis is loading"), BusyLoadingError)
    assert isinstance(_response_error("NOSCRIPT No matching script"), NoScriptError)
    garbled = _response_error("MOVED nonsense")
    assert type(garbled) is ResponseError
    assert type(_response_error("ERR wrong number of arguments")) is ResponseError


def test_the_cluster_setting() -> None:
    assert Config.from_env({}).redis_cluster == "auto"
    assert Config.from_env({"CONTINUITY_REDIS_CLUSTER": "On"}).redis_cluster == "on"
    assert Config.from_env({"CONTINUITY_REDIS_CLUSTER": "off"}).redis_cluster == "off"
    with pytest.raises(ConfigError, match="CONTINUITY_REDIS_CLUSTER"):
        Config.from_env({"CONTINUITY_REDIS_CLUSTER": "maybe"})
