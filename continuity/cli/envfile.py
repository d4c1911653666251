"""`.continuity/env`: where `continuity up` shares the addresses and keys of the stack it runs;
every client command reads it for a variable that is not set."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

ENV_FILE = Path(".continuity") / "env"
SHARED_VARIABLES = ("NATS_URL", "REDIS_URL", "CONTINUITY_RUNNER_KEYS")


def read_env_file(path: Path = ENV_FILE) -> dict[str, str]:
    """`export NAME=value` lines of `path` (as `write_env_file` writes them); {} if absent."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for word in words:
            name, sep, value = word.partition("=")
            if sep and name in SHARED_VARIABLES:
                values[name] = value
    return values


def write_env_file(path: Path, values: Mapping[str, str]) -> None:
    """A file a shell can source (`. .continuity/env`); only its owner may read it, as it may
    hold runner keys and credentials."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in values.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def setting(name: str) -> str | None:
    """A variable's value: the environment's when set, else `.continuity/env`'s."""
    return os.environ.get(name) or read_env_file().get(name) or None
