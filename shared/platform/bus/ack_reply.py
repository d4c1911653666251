"""What a JetStream delivery's reply subject says about it, read without nats-py's `Msg.metadata`.

A delivered message's reply subject is its acknowledgement address:
`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp ns>.<pending>`,
or, from servers that add the domain and account hash, the same with those two tokens after
`$JS.ACK` (and possibly a random token at the end). `Msg.metadata` builds a dataclass and a
`datetime` for every message; the hot path needs one number, so it reads that token alone.
"""

from __future__ import annotations

_V1_TOKENS = 9
_V2_MIN_TOKENS = 11  # nats-py accepts the domain form with or without its trailing token
_STREAM_SEQ = 5
_TIMESTAMP = 7


def _offset(tokens: list[str]) -> int | None:
    """Where the common tokens start past `$JS.ACK` (0 or 2), or None for another subject."""
    if len(tokens) < _V1_TOKENS or tokens[0] != "$JS" or tokens[1] != "ACK":
        return None
    if len(tokens) == _V1_TOKENS:
        return 0
    return 2 if len(tokens) >= _V2_MIN_TOKENS else None


def _token(reply: str | None, index: int) -> int | None:
    if not reply:
        return None
    tokens = reply.split(".")
    offset = _offset(tokens)
    if offset is None:
        return None
    try:
        return int(tokens[index + offset])
    except ValueError:
        return None


def stored_at(reply: str | None) -> float | None:
    """When JetStream stored the message, in epoch seconds; None if `reply` is no ack subject."""
    ns = _token(reply, _TIMESTAMP)
    return ns / 1_000_000_000 if ns is not None else None


def stream_seq(reply: str | None) -> int | None:
    """The message's sequence number in its stream; None if `reply` is no ack subject."""
    return _token(reply, _STREAM_SEQ)
