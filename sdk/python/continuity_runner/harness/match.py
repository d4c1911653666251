"""The matcher: the outcome of a resume, as the harness left it, against a harness's ordered rules.

The first rule whose conditions all hold decides: `Assessment(failure_class, rule)`, the class
None when the outcome is not a failure. The TypeScript SDK implements the same semantics
(src/harness/match.ts); both play the shared corpus, sdk/harness-corpus.json, in their tests.

Preparation, once per outcome:
- `text` is stderr, a line break, then stdout, without ANSI escape sequences (CSI, and OSC ended
  by BEL). Text conditions are plain, case-sensitive substrings of it.
- `documents` are the JSON objects of stdout: all of it when it is one object, else each line
  (trimmed) that is one, in order; arrays are not documents. Only the first `MAX_DOCUMENT_BYTES`
  of stdout (UTF-8) and its first `MAX_DOCUMENT_LINES` lines are read for documents.
- An outcome larger than `MAX_OUTCOME_BYTES` in all (UTF-8 of stdout, stderr and the error) is
  refused (`InvalidRequest`, `payload_too_large`), as is one of the wrong types (`invalid_field`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from continuity_runner.errors import InvalidRequest
from continuity_runner.harness.table import HarnessClass, JsonCondition, Rule, When

MAX_OUTCOME_BYTES = 4 * 1024 * 1024
MAX_DOCUMENT_BYTES = 1024 * 1024
MAX_DOCUMENT_LINES = 1000
MAX_SAFE_INT = 2**53 - 1

_ANSI_CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_ANSI_OSC = re.compile(r"\x1b\][^\x07]*\x07")


class OutcomeError(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """An SDK harness's exception (`type`: its class name) and the API's error code (`code`:
    `context_length_exceeded`, a JSON-RPC code such as -32002)."""

    type: str | None = None
    code: str | int | None = None


class Outcome(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """What a resume left: the exit code (None: no process exit, an SDK or protocol harness), its
    output, and for an SDK harness the exception and error code."""

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    error: OutcomeError | None = None


OutcomeInput = Outcome | Mapping[str, Any]
"""An `Outcome`, or its JSON form as a mapping (`{"exit_code": 1, "stdout": "", ...}`)."""


class Assessment(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """The first rule that held: its class (None: not a failure) and its id."""

    failure_class: HarnessClass | None
    rule: str


class Prepared(msgspec.Struct, frozen=True):
    """An outcome, checked and prepared once for all the rules."""

    outcome: Outcome
    text: str
    documents: list[dict[str, Any]]


def strip_ansi(text: str) -> str:
    """`text` without ANSI escape sequences."""
    return _ANSI_OSC.sub("", _ANSI_CSI.sub("", text))


def _utf8_size(text: str) -> int:
    # A lone surrogate counts as 3 bytes, as the replacement character the TypeScript SDK writes.
    return len(text.encode("utf-8", "surrogatepass"))


def _is_safe_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_SAFE_INT


def check_outcome(outcome: OutcomeInput) -> Outcome:
    """`outcome` (an `Outcome`, or its JSON form as a mapping) once it holds: `InvalidRequest`
    naming the field otherwise (a Struct is not checked when it is made)."""
    if isinstance(outcome, Mapping):
        try:
            outcome = msgspec.convert(dict(outcome), Outcome)
        except msgspec.ValidationError as exc:
            raise _refusal(exc) from None
    if not isinstance(outcome, Outcome):
        raise InvalidRequest("an outcome is an Outcome or a mapping of its fields", field="outcome")
    if outcome.exit_code is not None and not _is_safe_int(outcome.exit_code):
        raise InvalidRequest("exit_code must be an integer (2^53 - 1 at most) or None", field="exit_code")
    for field in ("stdout", "stderr"):
        if not isinstance(getattr(outcome, field), str):
            raise InvalidRequest(f"{field} must be a string", field=field)
    error = outcome.error
    size = _utf8_size(outcome.stdout) + _utf8_size(outcome.stderr)
    if error is not None:
        if not isinstance(error, OutcomeError):
            raise InvalidRequest("error must be an OutcomeError or None", field="error")
        if error.type is not None and not isinstance(error.type, str):
            raise InvalidRequest("error.type must be a string or None", field="error.type")
        code = error.code
        if code is not None and not isinstance(code, str) and not _is_safe_int(code):
            raise InvalidRequest("error.code must be a string, an integer or None", field="error.code")
        # Measured without encoding to UTF-8 first: a lone surrogate is refused by a strict encoder.
        error_json = json.dumps({"type": error.type, "code": code}, ensure_ascii=False, separators=(",", ":"))
        size += _utf8_size(error_json)
    if size > MAX_OUTCOME_BYTES:
        raise InvalidRequest(
            f"the outcome is {size} bytes: more than {MAX_OUTCOME_BYTES} are refused",
            code="payload_too_large",
            field="outcome",
        )
    return outcome


def decode_outcome(data: bytes | str) -> Outcome:
    """An outcome from its JSON (`{"exit_code", "stdout", "stderr", "error"}`), checked."""
    try:
        outcome = msgspec.json.decode(data, type=Outcome)
    except msgspec.ValidationError as exc:
        raise _refusal(exc) from None
    except msgspec.DecodeError:
        raise InvalidRequest("the outcome is not JSON", code="malformed_json", field="outcome") from None
    return check_outcome(outcome)


_WHERE = re.compile(r"^(?P<what>.*) - at `\$\.?(?P<path>[^`]*)`$", re.DOTALL)


def _refusal(exc: msgspec.ValidationError) -> InvalidRequest:
    m = _WHERE.match(str(exc))
    if m is None:
        return InvalidRequest(f"not an outcome: {exc}", field="outcome")
    path = m.group("path") or "outcome"
    return InvalidRequest(f"{path}: {m.group('what')}", field=path)


def _head(text: str, limit: int) -> str:
    """The first `limit` bytes of `text` as UTF-8, never cutting a character."""
    if len(text) * 3 <= limit:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    end = limit
    while end > 0 and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end].decode("utf-8", "surrogatepass")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def documents_of(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of stdout (see the module's docstring)."""
    head = strip_ansi(_head(stdout, MAX_DOCUMENT_BYTES))
    whole = _object(head.strip())
    if whole is not None:
        return [whole]
    documents = []
    for line in head.split("\n")[:MAX_DOCUMENT_LINES]:
        trimmed = line.strip()
        if trimmed.startswith("{"):
            document = _object(trimmed)
            if document is not None:
                documents.append(document)
    return documents


def prepare(outcome: OutcomeInput) -> Prepared:
    """Checks `outcome` and prepares what the rules read from it."""
    checked = check_outcome(outcome)
    return Prepared(checked, strip_ansi(f"{checked.stderr}\n{checked.stdout}"), documents_of(checked.stdout))


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality without coercion: 1 is not "1", true is not 1; 1 is 1.0 (one JSON number);
    key order does not matter."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) or isinstance(b, int | float):
        return (
            isinstance(a, int | float)
            and isinstance(b, int | float)
            and not (isinstance(a, float) and math.isnan(a))
            and a == b
        )
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list) or isinstance(b, list):
        return (
            isinstance(a, list)
            and isinstance(b, list)
            and len(a) == len(b)
            and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return False


_MISSING = object()


def _resolve(document: dict[str, Any], path: str) -> Any:
    value: Any = document
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _holds(item: JsonCondition, document: dict[str, Any]) -> bool:
    value = _resolve(document, item.path)
    if value is _MISSING:
        return False
    if item.equals is not UNSET:
        return json_equal(value, item.equals)
    if not isinstance(item.in_, UnsetType):
        return any(json_equal(value, candidate) for candidate in item.in_)
    if not isinstance(item.contains, UnsetType):
        return isinstance(value, str) and item.contains in value
    return item.present is True


def _exit_holds(exit: object, code: int | None) -> bool:
    if exit is UNSET or exit == "any":
        return True
    if exit == "zero":
        return code == 0
    if exit == "nonzero":
        return code is not None and code != 0
    if exit == "none":
        return code is None
    return code is not None and isinstance(exit, list) and code in exit


def when_holds(when: When, prepared: Prepared) -> bool:
    """Whether every condition of `when` holds for the prepared outcome."""
    outcome, text = prepared.outcome, prepared.text
    if not _exit_holds(when.exit, outcome.exit_code):
        return False
    if not isinstance(when.json, UnsetType):
        items = when.json
        if not any(all(_holds(item, doc) for item in items) for doc in prepared.documents):
            return False
    error = outcome.error
    if not isinstance(when.error, UnsetType) and when.error != (error is not None):
        return False
    if not isinstance(when.error_type, UnsetType) and (
        error is None or not any(json_equal(error.type, t) for t in when.error_type)
    ):
        return False
    if not isinstance(when.error_code, UnsetType) and (
        error is None or not any(json_equal(error.code, c) for c in when.error_code)
    ):
        return False
    if not isinstance(when.text, UnsetType) and not any(s in text for s in when.text):
        return False
    return isinstance(when.unless_text, UnsetType) or not any(s in text for s in when.unless_text)


def assess_with(rules: Sequence[Rule], outcome: OutcomeInput) -> Assessment:
    """The first of `rules` whose conditions hold for `outcome` decides."""
    prepared = prepare(outcome)
    for rule in rules:
        if when_holds(rule.when, prepared):
            return Assessment(failure_class=rule.failure_class, rule=rule.id)
    # A checked table ends with a rule for any outcome: only unchecked rules get here.
    raise ValueError("no rule decided the outcome: the rules do not end with a rule for any outcome")
