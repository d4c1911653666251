"""The pinned agent harness CLIs (tests/harnesses): exact versions, no scripts of ours, a lock
without download addresses that `npm ci` accepts, and `make test` installing them."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from continuity.tools.harness_lock import LockError, complete, platform_entry

ROOT = Path(__file__).resolve().parents[2]
HARNESSES = ROOT / "tests" / "harnesses"
PINS = {
    "@anthropic-ai/claude-code": "2.1.332",
    "@openai/codex": "0.171.0",
    "@google/gemini-cli": "0.61.0",
    "opencode-ai": "1.18.33",
}


def lock() -> dict[str, object]:
    loaded: dict[str, object] = json.loads((HARNESSES / "package-lock.json").read_text())
    return loaded


def test_the_four_clis_are_pinned_exactly_in_a_private_package_without_scripts() -> None:
    package = json.loads((HARNESSES / "package.json").read_text())
    assert package["private"] is True and "scripts" not in package
    assert package["dependencies"] == PINS and "devDependencies" not in package
    packages = lock()["packages"]
    assert isinstance(packages, dict)
    assert packages[""]["dependencies"] == PINS
    for name, version in PINS.items():
        assert packages[f"node_modules/{name}"]["version"] == version, name


def test_the_lock_records_no_download_address() -> None:
    text = (HARNESSES / "package-lock.json").read_text()
    assert '"resolved"' not in text and "://" not in text
    assert "omit-lockfile-registry-resolved=true" in (HARNESSES / ".npmrc").read_text().splitlines()
    planted = copy.deepcopy(lock())
    packages = planted["packages"]
    assert isinstance(packages, dict)
    packages["node_modules/opencode-ai"]["resolved"] = "file:opencode-ai-1.18.33.tgz"
    with pytest.raises(LockError, match="download addresses recorded for node_modules/opencode-ai"):
        complete(planted)


def test_every_optional_dependency_is_locked_so_npm_ci_accepts_the_lock() -> None:
    complete_lock = lock()
    assert complete(copy.deepcopy(complete_lock)) == []
    # With a platform entry missing (as `npm install` writes it when the registry does not serve
    # that platform's package), the lock is completed from the package's name.
    planted = copy.deepcopy(complete_lock)
    packages = planted["packages"]
    assert isinstance(packages, dict)
    del packages["node_modules/opencode-linux-arm64-musl"]
    assert complete(planted) == ["opencode-linux-arm64-musl"]
    assert planted == complete_lock
    # The linux-x64 platform packages of codex and opencode are real, hashed entries.
    for name in ("@openai/codex-linux-x64", "opencode-linux-x64", "@anthropic-ai/claude-code-linux-x64"):
        entry = packages[f"node_modules/{name}"]
        assert entry["optional"] is True and entry["os"] == ["linux"] and entry["cpu"] == ["x64"]
        assert entry["integrity"].startswith("sha512-"), name


def test_a_platform_entry_is_read_from_the_package_name() -> None:
    assert platform_entry("opencode-windows-x64-baseline", "1.18.33") == {
        "version": "1.18.33",
        "cpu": ["x64"],
        "optional": True,
        "os": ["win32"],
    }
    assert platform_entry("opencode-linux-arm64-musl", "1.18.33")["libc"] == ["musl"]
    with pytest.raises(LockError, match="names no platform"):
        platform_entry("left-pad", "1.0.0")


def test_make_test_installs_the_clis_when_the_lock_changes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^unit: .*\bharnesses\b", makefile, re.MULTILINE)
    assert re.search(r"^test: .*\bunit\b", makefile, re.MULTILINE)
    stamp = re.search(r"^\$\(HARNESSES\)/node_modules/\.installed: (.+)$", makefile, re.MULTILINE)
    assert stamp is not None and "$(HARNESSES)/package-lock.json" in stamp.group(1)
    assert "cd $(HARNESSES) && npm ci --no-audit --no-fund --loglevel=error" in makefile
    assert "tests/harnesses/node_modules/" in (ROOT / ".gitignore").read_text().splitlines()
