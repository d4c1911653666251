"""The cursor of a paged list (reconciliations and runs): the (score, member) of a page's last
item, so the next page starts right after it however the indexes changed meanwhile."""

from __future__ import annotations

import base64
import binascii

import msgspec

from shared.contract.limits import MAX_PAGE_BYTES

PAGE_ITEMS_BYTES = MAX_PAGE_BYTES - 4096
"""The items of one page: the page limit less room for the reply's envelope and cursor."""

_encode = msgspec.json.Encoder().encode
_position = msgspec.json.Decoder(tuple[float, str])


class BadCursor(ValueError):
    """A `cursor` that no page of this list returned."""


def encode_cursor(score: float, name: bytes) -> str:
    raw = _encode((score, name.decode()))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, bytes]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, name = _position.decode(raw)
    except (binascii.Error, ValueError, msgspec.MsgspecError):
        raise BadCursor("not a cursor of this list") from None
    return score, name.encode()
