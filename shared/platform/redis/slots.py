"""Redis Cluster hash slots: which slot a key belongs to, which key a command is routed by, and
which master serves each slot (from `CLUSTER SLOTS`)."""

from __future__ import annotations

import binascii
from typing import Any

SLOTS = 16384

Address = tuple[str, int]

# Commands the pipelined connection sends that name no key: any node may answer them.
_KEYLESS = frozenset(
    {"PING", "INFO", "CLUSTER", "ASKING", "AUTH", "HELLO", "SELECT", "SCRIPT", "CLIENT", "ECHO", "TIME"}
)
_SCRIPTED = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})


def key_slot(key: bytes | str) -> int:
    """The slot of `key`: CRC16 (XMODEM) of its hash tag (the text between the first `{` and
    the next `}`, when not empty), else of the whole key, modulo 16384."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % SLOTS


def first_key(args: tuple[Any, ...]) -> bytes | str | None:
    """The key a command is routed by: its first key (a script's first KEYS entry), or None
    for a command that names no key."""
    if not args:
        return None
    name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
    name = name.upper()
    if name in _SCRIPTED:
        if len(args) > 3 and int(args[2]) > 0:
            key = args[3]
        else:
            return None
    elif name in _KEYLESS or len(args) < 2:
        return None
    else:
        key = args[1]
    return key if isinstance(key, bytes | str) else str(key)


def command_slot(args: tuple[Any, ...]) -> int | None:
    key = first_key(args)
    return None if key is None else key_slot(key)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def slot_table(reply: list[Any], asked: Address) -> list[Address | None]:
    """The master of every slot from a raw `CLUSTER SLOTS` reply (None where no master serves
    it); a master announced without a host is on the host of the node that was asked."""
    table: list[Address | None] = [None] * SLOTS
    for entry in reply:
        start, end, master = int(entry[0]), int(entry[1]), entry[2]
        address = (_text(master[0]) or asked[0], int(master[1]))
        table[start : end + 1] = [address] * (end - start + 1)
    return table


def node_addresses(reply: list[Any], asked: Address) -> list[Address]:
    """Every node of a raw `CLUSTER SLOTS` reply, masters first: where to ask next time."""
    masters = [(_text(e[2][0]) or asked[0], int(e[2][1])) for e in reply]
    replicas = [(_text(r[0]) or asked[0], int(r[1])) for e in reply for r in e[3:]]
    return list(dict.fromkeys([*masters, *replicas]))
