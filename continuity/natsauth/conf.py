"""A reader for the part of the nats-server configuration format Continuity ships: maps and
arrays, quoted and bare values, `#` comments, `$NAME` references to an earlier top-level key,
and `include` (read when the file is there, skipped when it is not).

It reads deploy/nats/auth.conf and the runner account template (continuity/cli/runner_accounts.py)
so that the decentralized layout is built from the very rules the config-file layout ships:
one source for every permission, export and import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r,]+)
  | (?P<newline>\n)
  | (?P<comment>(\#|//)[^\n]*)
  | (?P<punct>[{}\[\]])
  | (?P<sep>[:=])
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<bare>[^\s,:={}\[\]"#]+)
    """,
    re.VERBOSE,
)


class ConfError(ValueError):
    """Text this reader does not understand."""


@dataclass(frozen=True)
class Ref:
    """`$NAME` that names no earlier top-level key: an environment variable of the server."""

    name: str


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ConfError(f"unexpected character at offset {pos}")
        kind = m.lastgroup or ""
        if kind == "newline":
            out.append(("nl", "\n"))
        elif kind not in ("space", "comment"):
            out.append((kind, m.group()))
        pos = m.end()
    return out


class _Reader:
    def __init__(self, text: str, base: Path | None) -> None:
        self.tokens = _tokens(text)
        self.pos = 0
        self.base = base
        self.top: dict[str, Any] = {}

    def _skip_newlines(self) -> None:
        while self.pos < len(self.tokens) and self.tokens[self.pos][0] == "nl":
            self.pos += 1

    def _next(self) -> tuple[str, str]:
        self._skip_newlines()
        if self.pos >= len(self.tokens):
            raise ConfError("unexpected end of text")
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def _peek(self) -> tuple[str, str] | None:
        self._skip_newlines()
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def entries(self, into: dict[str, Any], closing: str | None, top: bool = False) -> dict[str, Any]:
        while True:
            token = self._peek()
            if token is None:
                if closing is not None:
                    raise ConfError(f"missing {closing}")
                return into
            if token == ("punct", closing):
                self.pos += 1
                return into
            kind, key = self._next()
            if kind == "string":
                key = key[1:-1]
            elif kind != "bare":
                raise ConfError(f"a key expected, got {key!r}")
            if key == "include":
                self._include(self._next()[1], into, top)
                continue
            following = self._peek()
            if following is not None and following[0] == "sep":
                self.pos += 1
            into[key] = self.value()
            if top:
                self.top[key] = into[key]

    def _include(self, name: str, into: dict[str, Any], top: bool) -> None:
        path = (self.base or Path.cwd()) / name.strip('"')
        if path.exists():
            reader = _Reader(path.read_text(), path.parent)
            reader.top = self.top
            reader.entries(into, None, top)

    def value(self) -> Any:
        kind, text = self._next()
        if text == "{":
            return self.entries({}, "}")
        if text == "[":
            items = []
            while self._peek() != ("punct", "]"):
                items.append(self.value())
            self.pos += 1
            return items
        if kind == "string":
            return text[1:-1].encode().decode("unicode_escape")
        if kind != "bare":
            raise ConfError(f"a value expected, got {text!r}")
        if text.startswith("$"):
            return self.top.get(text[1:], Ref(text[1:]))
        if text in ("true", "false"):
            return text == "true"
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        return text


def loads(text: str, base: Path | None = None) -> dict[str, Any]:
    """The configuration in `text`; `include` is read relative to `base`."""
    reader = _Reader(text, base)
    return reader.entries(reader.top, None, top=True)


def load(path: Path) -> dict[str, Any]:
    return loads(path.read_text(), path.parent)
