"""The Python runner SDK as a runner installs it: `python -m build` makes its sdist and, from
that sdist, its wheel (hatchling the backend), both with the licence, the changelog and the
README; the wheel installs into an empty virtual environment with its two dependencies, and
works there, from its installed files: a bad runner id is an `InvalidRequest`, a closed port an
`Unavailable` within `connect_timeout`, a signature 64 hex characters. `pip install ./sdk/python`
installs it too."""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

SDK = Path(__file__).resolve().parents[2] / "sdk" / "python"
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
VERSION = "0.1.0"

pytestmark = pytest.mark.timeout(600)

CHECK = """
import asyncio, importlib.metadata, json, sys, time
import continuity_runner
from continuity_runner import InvalidRequest, RunnerOptions, Unavailable, connect
from continuity_runner.signing import sign_command_result

out = {"from": continuity_runner.__file__, "version": importlib.metadata.version("continuity-runner")}
try:
    RunnerOptions(runner_id="runner a")
except InvalidRequest as err:
    out["bad_id"] = err.field
signed = sign_command_result("k1", bytes(32), "runner-a", "run-1", 1, "provider.attach", "refused")
out["signature"] = signed.signature

async def closed() -> None:
    started = time.monotonic()
    try:
        await connect(RunnerOptions(runner_id="runner-a", servers=sys.argv[1], connect_timeout=1.0))
    except Unavailable as err:
        out["closed"] = [err.code, time.monotonic() - started]

asyncio.run(closed())
print(json.dumps(out))
"""


def _run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _environment(root: Path) -> Path:
    """An empty virtual environment; this checkout's pip installs into it (`--python`), which is
    much faster than giving each its own pip."""
    venv.EnvBuilder(with_pip=False).create(root)
    return root / "bin" / "python"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_sdk_builds_an_sdist_and_a_wheel_that_installs_into_an_empty_environment(tmp_path: Path) -> None:
    # The builder: `build` and the backend, so that the build needs no environment of its own.
    builder = _environment(tmp_path / "builder")
    _run(*PIP, "--python", builder, "install", "build", "hatchling>=1.27")
    dist = tmp_path / "dist"
    _run(builder, "-m", "build", "--no-isolation", "--outdir", dist, SDK)  # sdist, then wheel from it

    with tarfile.open(dist / f"continuity_runner-{VERSION}.tar.gz") as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "continuity_runner/py.typed"} <= names
    assert "examples/runner.py" in names

    wheel = dist / f"continuity_runner-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"continuity_runner-{VERSION}.dist-info/METADATA").decode()
    assert f"continuity_runner-{VERSION}.dist-info/licenses/LICENSE" in names
    package = {f"continuity_runner/{n}" for n in ("__init__.py", "checks.py", "py.typed")}
    assert package <= names
    assert "License-Expression: Apache-2.0" in metadata and f"Version: {VERSION}" in metadata

    # An empty environment: the wheel and its dependencies, at the versions this checkout uses.
    env = _environment(tmp_path / "env")
    pins = tmp_path / "pins.txt"
    pins.write_text("".join(f"{d}=={importlib.metadata.version(d)}\n" for d in ("msgspec", "nats-py")))
    _run(*PIP, "--python", env, "install", "--constraint", pins, wheel)
    _run(*PIP, "--python", env, "check")

    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of the checkout
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    out = json.loads(_run(env, script, f"nats://127.0.0.1:{_closed_port()}", cwd=tmp_path, env=clean))
    assert out["from"].startswith(str(tmp_path / "env")), out["from"]
    assert out["version"] == VERSION and out["bad_id"] == "runner_id"
    assert len(out["signature"]) == 64 and int(out["signature"], 16) >= 0
    code, took = out["closed"]
    assert code == "unavailable" and took < 1.0 + 3.0

    # `pip install ./sdk/python`, the other way docs/integrate-a-runner.md gives.
    from_path = _environment(tmp_path / "from-path")
    _run(*PIP, "--python", from_path, "install", "--constraint", pins, SDK)
    where = _run(
        from_path,
        "-c",
        "import continuity_runner; print(continuity_runner.__file__)",
        cwd=tmp_path,
        env=clean,
    )
    assert where.startswith(str(tmp_path / "from-path")), where
