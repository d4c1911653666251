"""Decoding of wire input into contract Structs, with sanitized errors.

msgspec's own messages can quote the offending value (an unknown enum value, say); the
reasons produced here name only the field path and the kind of problem, so no value, secret
or generation ever reaches a reply, a log line or a dead letter's reason.

Beyond the Structs' own constraints, `decode` enforces what msgspec does not check for the
fields it skips (unknown fields are ignored, contract section 1): the message's size, that
every byte is UTF-8, and the nesting depth (see the contract's Limits table).
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from shared.contract.errors import INVALID_FIELD, MALFORMED_JSON, MISSING_FIELD, PAYLOAD_TOO_LARGE
from shared.contract.limits import MAX_DEPTH, MAX_REQUEST_BYTES

T = TypeVar("T")

_PATH = re.compile(r" - at `(\$[^`]*)`\s*$")
_PATH_SAFE = re.compile(r"[^A-Za-z0-9_.\[\]$]")
# On JSON that msgspec accepted, every string is closed, so this match is linear.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_LEAF = re.compile(rb"\[\]|\{\}")

MALFORMED = MALFORMED_JSON.message


class InvalidInput(ValueError):
    """Input that cannot be accepted; `code` is closed, `message` is safe to show."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def sanitize_validation_error(err: msgspec.MsgspecError) -> InvalidInput:
    text = str(err)
    match = _PATH.search(text)
    path = _PATH_SAFE.sub("?", match.group(1))[:200] if match else "$"
    if isinstance(err, msgspec.ValidationError):
        if text.startswith("Object missing required field"):
            field = re.search(r"field `([^`]*)`", text)
            name = _PATH_SAFE.sub("?", field.group(1))[:64] if field else "?"
            where = path if path != "$" else ""
            return InvalidInput(MISSING_FIELD.code, f"required field `{name}` is missing {where}".strip())
        if text.startswith("Expected"):
            return InvalidInput(INVALID_FIELD.code, f"value at `{path}` has the wrong type or format")
        return InvalidInput(INVALID_FIELD.code, f"value at `{path}` is not allowed")
    return InvalidInput(MALFORMED_JSON.code, MALFORMED)


def too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether valid JSON nests objects and arrays more than `limit` deep.

    Strings are dropped (their brackets are text), then each round removes the innermost
    `[]` and `{}` pairs: what is left after `limit` rounds is deeper than `limit`."""
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", data))
    for _ in range(limit):
        if not brackets:
            return False
        brackets = _LEAF.sub(b"", brackets)
    return bool(brackets)


def decode(data: bytes, decoder: msgspec.json.Decoder[T], *, max_bytes: int = MAX_REQUEST_BYTES) -> T:
    """Decode with a prepared decoder; any failure is an `InvalidInput` with a safe reason.

    A payload over `max_bytes` is refused before any byte of it is parsed."""
    if len(data) > max_bytes:
        raise InvalidInput(PAYLOAD_TOO_LARGE.code, f"the payload is larger than {max_bytes} bytes")
    if not data.isascii():
        try:
            data.decode("utf-8")  # msgspec does not check the bytes of the fields it skips
        except UnicodeDecodeError:
            raise InvalidInput(MALFORMED_JSON.code, MALFORMED) from None
    try:
        value = decoder.decode(data)
    except msgspec.MsgspecError as err:
        raise sanitize_validation_error(err) from None
    except RecursionError:
        raise InvalidInput(MALFORMED_JSON.code, f"the payload nests deeper than {MAX_DEPTH} levels") from None
    # Counting brackets is nearly free; only a message with many of them is measured.
    if data.count(b"{") + data.count(b"[") > MAX_DEPTH and too_deep(data):
        raise InvalidInput(MALFORMED_JSON.code, f"the payload nests deeper than {MAX_DEPTH} levels")
    return value
