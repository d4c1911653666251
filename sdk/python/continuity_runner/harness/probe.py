"""The presence probe: whether a harness's session is on this host, from the table's `sessions`.

It asks the file system only whether a regular file exists (`os.stat`) and lists the folders a
`*` reads (`os.scandir`); it never opens a file, so a FIFO or a socket named like a session never
blocks it and counts as no session. A session id that does not match the harness's pattern is
`absent` at once: it never becomes part of a path. Filled-in values are literal (only the
template's own `*` is a wildcard), and a value that would make a segment other than one plain
name (`..`, a `/`) is never used.

`present`: a file of the session is there. `absent`: none is (or the sessions' root does not
exist). `unknown`: the probe cannot tell: the harness keeps no files it can read (an SDK
harness, sessions in a database), the root cannot be known (no HOME for `~`), the working
directory of a harness that keys sessions by it was not given, or a folder could not be read.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from typing import Literal

from continuity_runner.harness.table import CwdKeyScheme, Sessions

Presence = Literal["present", "absent", "unknown"]
Env = Mapping[str, str]
"""The environment the harness runs with: its root variable (CLAUDE_CONFIG_DIR...) and HOME."""

_MISSING = (errno.ENOENT, errno.ENOTDIR)
_PLACEHOLDER = re.compile(r"(\{session_id\}|\{session_id_8\}|\{cwd_key\}|\*)")
_PLAIN_DIR_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_RESERVED = re.compile(r"con|prn|aux|nul|com[0-9]|lpt[0-9]", re.IGNORECASE)
_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"
CLAUDE_KEY_CHARS = 200


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


def _claude_hash(text: str) -> str:
    """Claude Code's hash of a path: the 32-bit `h = h * 31 + unit` over its UTF-16 units, its
    absolute value in base 36."""
    h = 0
    for unit in _utf16_units(text):
        h = (h * 31 + unit) & 0xFFFFFFFF
    value = abs(h - 2**32 if h >= 2**31 else h)
    digits = ""
    while True:
        value, digit = divmod(value, 36)
        digits = _B36[digit] + digits
        if value == 0:
            return digits


def claude_key(cwd: str, env: Mapping[str, str] | None = None) -> str:
    """Claude Code's project folder name of `cwd` (seen with 2.1.332): every UTF-16 unit other
    than A-Z a-z 0-9 becomes `-`; a name longer than 200 characters is cut to 200 and followed by
    `-` and the path's hash. With CLAUDE_CONFIG_DIR set, a plain CLAUDE_CODE_PROJECT_DIR_NAME
    (1 to 64 of A-Z a-z 0-9 _ -, not a reserved device name) is the name instead."""
    env = env or {}
    override = env.get("CLAUDE_CODE_PROJECT_DIR_NAME")
    if (
        env.get("CLAUDE_CONFIG_DIR")
        and override
        and _PLAIN_DIR_NAME.fullmatch(override)
        and not _RESERVED.fullmatch(override)
    ):
        return override
    name = "".join(chr(u) if u < 128 and chr(u).isalnum() else "-" for u in _utf16_units(cwd))
    if len(name) <= CLAUDE_KEY_CHARS:
        return name
    return f"{name[:CLAUDE_KEY_CHARS]}-{_claude_hash(cwd)}"


def cwd_key(scheme: CwdKeyScheme, cwd: str, env: Mapping[str, str] | None = None) -> str:
    """The folder name of the working directory `cwd` under the scheme `scheme`."""
    if scheme == "claude":
        return claude_key(cwd, env)
    raise ValueError(f"no cwd_key scheme {scheme!r}")


def sessions_root(spec: Sessions, env: Mapping[str, str]) -> str | None:
    """The sessions' root folder, or None when it cannot be known (`~` without an absolute HOME)."""
    moved = env.get(spec.root.env) if spec.root.env is not None else None
    root = moved if moved else spec.root.default
    if root == "~" or root.startswith("~/"):
        home = env.get("HOME")
        if not home or not os.path.isabs(home):
            return None
        root = os.path.join(home, root[2:]) if root != "~" else home
    return root if os.path.isabs(root) else None


Segment = str | re.Pattern[str]


def _segments(template: str, values: Mapping[str, str]) -> list[Segment] | None:
    """The segments of `template`, its placeholders filled in; None when a value would make a
    segment other than one plain name."""
    segments: list[Segment] = []
    for part in template.split("/"):
        tokens = [t for t in _PLACEHOLDER.split(part) if t]
        filled = [values[t[1:-1]] if t.startswith("{") else t for t in tokens]
        name = "".join(filled)
        if name in ("", ".", "..") or "/" in name or "\0" in name:
            return None
        if "*" not in tokens:
            segments.append(name)
            continue
        body = "".join(".*" if t == "*" else re.escape(f) for t, f in zip(tokens, filled, strict=True))
        segments.append(re.compile(body, re.DOTALL))
    return segments


def _is_file(path: str) -> Literal["found", "none", "unreadable"]:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return "none" if exc.errno in _MISSING else "unreadable"
    return "found" if stat.S_ISREG(mode) else "none"


def _walk(folder: str, segments: list[Segment]) -> Literal["found", "none", "unreadable"]:
    """Whether `segments` below `folder` name a regular file."""
    segment, rest = segments[0], segments[1:]
    if isinstance(segment, str):
        path = os.path.join(folder, segment)
        return _is_file(path) if not rest else _walk(path, rest)
    try:
        with os.scandir(folder) as entries:
            names = sorted(entry.name for entry in entries)
    except OSError as exc:
        return "none" if exc.errno in _MISSING else "unreadable"
    result: Literal["found", "none", "unreadable"] = "none"
    for name in names:
        if not segment.fullmatch(name):
            continue
        path = os.path.join(folder, name)
        found = _is_file(path) if not rest else _walk(path, rest)
        if found == "found":
            return "found"
        if found == "unreadable":
            result = "unreadable"
    return result


def probe_sessions(
    spec: Sessions | None,
    id_pattern: re.Pattern[str],
    session_id: str,
    cwd: str | None = None,
    env: Env | None = None,
) -> Presence:
    """Whether the session `session_id` is on this host (see the module's docstring)."""
    if not isinstance(session_id, str) or not id_pattern.fullmatch(session_id):
        return "absent"  # never a path
    if spec is None:
        return "unknown"
    env = os.environ if env is None else env
    root = sessions_root(spec, env)
    if root is None:
        return "unknown"
    key = ""
    if spec.cwd_key is not None:
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            return "unknown"
        key = cwd_key(spec.cwd_key, cwd, env)
    try:
        if not stat.S_ISDIR(os.stat(root).st_mode):
            return "absent"
    except OSError as exc:
        return "absent" if exc.errno in _MISSING else "unknown"
    values = {"session_id": session_id, "session_id_8": session_id[:8], "cwd_key": key}
    unreadable = False
    for template in spec.paths:
        segments = _segments(template, values)
        if segments is None:
            continue  # a value that is not one plain name is never a path
        found = _walk(root, segments)
        if found == "found":
            return "present"
        unreadable = unreadable or found == "unreadable"
    return "unknown" if unreadable else "absent"
