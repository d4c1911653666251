"""Shared helpers of the deploy tests: paths, required tools, rendered kustomize overlays.

A missing tool fails the test with the package to install; nothing is skipped silently, since
the test setup is expected to install every tool named here.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUSTOMIZE_DIR = DEPLOY / "kubernetes"
OVERLAYS = ("dev", "production")
SERVICES = ("classifier", "session-store", "archiver", "reconciliation", "console")

TOOL_PACKAGES = {
    "promtool": "the Debian package `prometheus` (apt-get install --no-install-recommends prometheus)",
    "prometheus": "the Debian package `prometheus` (apt-get install --no-install-recommends prometheus)",
    "kubectl": "kubectl (it renders kustomize overlays offline with `kubectl kustomize`)",
}


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not on PATH: install {TOOL_PACKAGES.get(name, name)}", pytrace=False)
    return path


def kustomize_command() -> list[str]:
    """`kustomize build` when a standalone kustomize exists, else `kubectl kustomize`."""
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return [require_tool("kubectl"), "kustomize"]


@cache
def _render(overlay: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        [*kustomize_command(), str(KUSTOMIZE_DIR / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"kustomize failed for overlay {overlay}:\n{result.stderr}", pytrace=False)
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def render(overlay: str) -> list[dict[str, Any]]:
    return list(_render(overlay))


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
