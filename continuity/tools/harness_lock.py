"""`python -m continuity.tools.harness_lock`: write tests/harnesses/package-lock.json, the lock of
the agent harness CLIs that the real-binary tests run (`make harnesses-lock` after editing
tests/harnesses/package.json).

It asks npm for the lock (`npm install --package-lock-only`; the folder's .npmrc keeps download
addresses out of it), then checks and completes it:

- No entry records a download address (`resolved`): `npm ci` installs every pinned version from
  the registry npm is configured with.
- A platform package that a locked package lists among its optionalDependencies but that the
  registry did not serve (opencode-ai 1.18.33 lists twelve, the registry at hand serves the two
  linux-x64 ones) is recorded as an optional entry for its platform, read from its name
  (`<name>-<os>-<cpu>[-baseline][-musl]`), with no integrity. Without it `npm ci` refuses the
  lock as out of sync; with it `npm ci` skips the entry on every other platform, as it skips
  any optional package of another platform.

Exit code 0 when the lock was written, 1 (with the reason) otherwise.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HARNESSES = ROOT / "tests" / "harnesses"

PLATFORM_NAME = re.compile(r"^.+-(darwin|linux|windows|win32)-(x64|arm64)(-baseline)?(-musl)?$")
NODE_OS = {"darwin": "darwin", "linux": "linux", "windows": "win32", "win32": "win32"}


class LockError(Exception):
    """The lock cannot be written as this module promises (the message says why)."""


def platform_entry(name: str, version: str) -> dict[str, Any]:
    """The lock entry of an optional platform package the registry did not serve: its version,
    `optional`, and the os, cpu (and libc) its name says."""
    found = PLATFORM_NAME.match(name)
    if found is None:
        raise LockError(f"{name}: missing from the lock, and its name names no platform")
    os_name, cpu, _baseline, musl = found.groups()
    entry: dict[str, Any] = {"version": version, "cpu": [cpu], "optional": True, "os": [NODE_OS[os_name]]}
    if musl:
        entry["libc"] = ["musl"]
    return entry


def locked(packages: dict[str, dict[str, Any]], key: str, name: str) -> bool:
    """Whether the package at `key` finds `name` in the lock, as node resolves it: in its own
    node_modules, or in one of the folders above."""
    folder = key
    while True:
        if f"{folder}/node_modules/{name}".lstrip("/") in packages:
            return True
        if not folder:
            return False
        cut = folder.rfind("/node_modules/")
        folder = folder[:cut] if cut >= 0 else ""


def complete(lock: dict[str, Any]) -> list[str]:
    """Add the entries of the optional platform packages missing from `lock` (in place); return
    their names. Raises LockError on a recorded download address, or on a missing optional
    dependency whose name names no platform."""
    packages: dict[str, dict[str, Any]] = lock["packages"]
    addressed = sorted(key for key, entry in packages.items() if "resolved" in entry)
    if addressed:
        raise LockError(f"download addresses recorded for {', '.join(addressed)}")
    added: list[str] = []
    for key, entry in list(packages.items()):
        for name, spec in entry.get("optionalDependencies", {}).items():
            if not locked(packages, key, name):
                packages[f"node_modules/{name}"] = platform_entry(name, spec)
                added.append(name)
    lock["packages"] = {key: packages[key] for key in sorted(packages)}
    return sorted(added)


def write(folder: Path = HARNESSES) -> list[str]:
    """Ask npm for the lock of `folder`, complete it, write it back; the names added."""
    subprocess.run(
        ["npm", "install", "--package-lock-only", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=folder,
        check=True,
    )
    path = folder / "package-lock.json"
    lock = json.loads(path.read_text())
    added = complete(lock)
    path.write_text(json.dumps(lock, indent=2) + "\n")
    return added


def main() -> int:
    try:
        added = write()
    except (LockError, subprocess.CalledProcessError) as err:
        print(f"harness lock: {err}", file=sys.stderr)
        return 1
    for name in added:
        print(f"recorded {name} (optional, not served by the registry)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
