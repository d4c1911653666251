"""Decoding of wire input into contract Structs, with sanitized errors.

msgspec's own messages can quote the offending value (an unknown enum value, say); the
reasons produced here name only the field path and the kind of problem, so no value, secret
or generation ever reaches a reply, a log line or a dead letter's reason.
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

T = TypeVar("T")

_PATH = re.compile(r" - at `(\$[^`]*)`\s*$")
_PATH_SAFE = re.compile(r"[^A-Za-z0-9_.\[\]$]")


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
            return InvalidInput("missing_field", f"required field `{name}` is missing {where}".strip())
        if text.startswith("Expected"):
            return InvalidInput("invalid_field", f"value at `{path}` has the wrong type or format")
        return InvalidInput("invalid_field", f"value at `{path}` is not allowed")
    return InvalidInput("malformed_json", "the payload is not a valid UTF-8 JSON object")


def decode(data: bytes, decoder: msgspec.json.Decoder[T]) -> T:
    """Decode with a prepared decoder; any failure is an `InvalidInput` with a safe reason."""
    try:
        return decoder.decode(data)
    except msgspec.MsgspecError as err:
        raise sanitize_validation_error(err) from None
