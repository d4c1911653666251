"""What a runner sends is checked before it is sent, as the services will check it.

A message is encoded, its size checked against its byte limit first (contract 9.8: the services
measure the bytes before they parse any), then decoded with the contract's Struct, which checks
every pattern, closed set, integer bound and character limit exactly as the services decode it.
A refusal is an `InvalidRequest` that names the field by its path in the message
(`error.code`, `session.tenant`) and never repeats its value, which may be a secret. The
TypeScript SDK makes the same checks (sdk/typescript/src/checks.ts); sdk/bad-inputs.json is
played by the tests of both.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import msgspec

from continuity_runner import limits
from continuity_runner.contract import ArchiveResult
from continuity_runner.errors import InvalidRequest

_encode = msgspec.json.Encoder().encode
# msgspec's text of a refusal: what was expected, then where (`$.error.code`); never the value,
# except for a closed set ("Invalid enum value 'x'"), which is reworded below.
_WHERE = re.compile(r"^(?P<what>.*) - at `\$(?P<path>[^`]*)`$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`$")


@functools.cache
def decoder_of(cls: type[Any]) -> msgspec.json.Decoder[Any]:
    """The decoder that checks a message of type `cls` (one per type, made once)."""
    return msgspec.json.Decoder(cls)


def encode_checked(message: msgspec.Struct, limit: int, prefix: str = "") -> bytes:
    """`message` as JSON, once it holds to the contract: at most `limit` bytes
    (`payload_too_large`), then every field (`invalid_field`, `missing_field`). `prefix` is the
    path of `message` inside what is sent (`command_result` for a signed result)."""
    try:
        payload = _encode(message)
    except UnicodeEncodeError:
        field = _unencodable(msgspec.to_builtins(message), prefix) or None
        what = f"{field or 'a value'} is not Unicode text (a lone surrogate)"
        raise InvalidRequest(what, field=field) from None
    except (TypeError, ValueError):
        raise InvalidRequest("a value of the message cannot be encoded as JSON") from None
    if len(payload) > limit:
        raise InvalidRequest(f"the message is larger than {limit} bytes", code="payload_too_large")
    try:
        decoder_of(type(message)).decode(payload)
    except msgspec.ValidationError as exc:
        raise refusal(exc, prefix) from None
    return payload


def check_value(value: object, kind: Any, field: str) -> None:
    """Refuse an argument that is not of the contract type `kind` (a `Token`, an `Attempt`)."""
    try:
        msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise refusal(exc, field) from None


def refusal(exc: msgspec.ValidationError, prefix: str = "") -> InvalidRequest:
    """The `InvalidRequest` of a failed decoding: the field's path, what the contract expects."""
    if isinstance(exc.__cause__, InvalidRequest):
        return exc.__cause__  # a Struct's own check (a time): it names its field already
    found = _WHERE.match(str(exc))
    what, path = (found["what"], found["path"]) if found else (str(exc), "")
    missing = _MISSING.match(what)
    if missing is not None:
        field = _join(prefix, path, missing["name"])
        return InvalidRequest(f"{field} is missing", code="missing_field", field=field)
    field = _join(prefix, path)
    if what.startswith("Expected "):
        detail = "expected " + what.removeprefix("Expected ")
    elif what.startswith("Invalid enum value"):
        detail = "is not one of the contract's values"
    else:
        detail = "is not valid"
    return InvalidRequest(f"{field or 'the message'}: {detail}", field=field or None)


def _join(*parts: str) -> str:
    return ".".join(p.strip(".") for p in parts if p.strip("."))


def _unencodable(value: object, path: str) -> str | None:
    """The path of the first string that UTF-8 cannot encode (a lone surrogate)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _unencodable(item, _join(path, str(key)))
            if found is not None:
                return found
    return None


def archive_answer(result: ArchiveResult) -> ArchiveResult:
    """The answer sent for an archive handler's result: the output cut to the contract's limit;
    a result that still breaks the contract (an exit code out of range, an output that is not
    text) is answered as a failed move."""
    if isinstance(result.output, str) and len(result.output) > limits.OUTPUT_CHARS:
        result = ArchiveResult(
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            output=result.output[: limits.OUTPUT_CHARS],
        )
    try:
        encode_checked(result, limits.MAX_REQUEST_BYTES)
    except InvalidRequest:
        return ArchiveResult(exit_code=1, output="the handler's result breaks the contract")
    return result
