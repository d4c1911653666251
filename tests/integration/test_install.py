"""What users install: the server's wheel and `pip install .` in an empty virtual environment.

The environment gets the runtime lock (what `make run` and the image install) and the project
itself, nothing else: `pip check` finds every requirement met, the command starts, every service
imports, and `continuity up` reaches ready on its embedded servers and stops cleanly.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import read_until

REPO = Path(__file__).resolve().parents[2]
PIP = ["-m", "pip", "--disable-pip-version-check", "--quiet"]

pytestmark = pytest.mark.timeout(600)


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def empty_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A virtual environment with the runtime lock installed and no project."""
    root = tmp_path_factory.mktemp("env")
    venv.EnvBuilder(with_pip=True).create(root)
    python = root / "bin" / "python"
    _run(python, *PIP, "install", "--require-hashes", "-r", REPO / "deploy" / "requirements-runtime.lock")
    yield python


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, *PIP, "wheel", "--no-deps", "-w", out, REPO)
    (built,) = out.glob("continuity-*.whl")
    return built


def _installed_command_works(python: Path, cwd: Path) -> None:
    _run(python, *PIP, "check")
    command = python.parent / "continuity"
    version = _run(command, "--version", cwd=cwd)
    assert re.fullmatch(r"continuity \d+\.\d+\.\d+\S*\n", version), version
    # Every service the registry discovers, from the installed files (not the checkout).
    where = _run(
        python,
        "-c",
        "import continuity, continuity_runner, importlib\n"
        "from services import registry\n"
        "for name, module in registry.SERVICES.items():\n"
        "    importlib.import_module(module)\n"
        "    print(name)\n"
        "print(continuity.__file__)\n"
        "print(continuity_runner.__file__)\n",
        cwd=cwd,
    ).split()
    assert set(where[:-2]) == {"archiver", "classifier", "console", "reconciliation", "session-store"}
    assert all("site-packages" in path for path in where[-2:]), where


def _up_reaches_ready(python: Path, cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "REDIS_URL", "PYTHONPATH")}
    proc = subprocess.Popen(
        [str(python.parent / "continuity"), "up", "--data-dir", str(cwd / "data")],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        text = read_until(proc, "Ctrl-C stops everything", 90)
        assert "Ctrl-C stops everything" in text, text
        urls = re.findall(r"^\S+\s+metrics (http://\S+)/metrics", text, re.M)
        assert len(urls) == 5, text
        for url in urls:
            with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
                assert response.status == 200
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, text + out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_built_wheel_installs_and_runs_in_an_empty_environment(
    empty_env: Path, wheel: Path, tmp_path: Path
) -> None:
    _run(empty_env, *PIP, "install", "--no-deps", "--force-reinstall", wheel)
    _installed_command_works(empty_env, tmp_path)
    _up_reaches_ready(empty_env, tmp_path)


def test_pip_install_of_the_checkout_gives_a_working_command(empty_env: Path, tmp_path: Path) -> None:
    _run(empty_env, *PIP, "uninstall", "--yes", "continuity")
    _run(empty_env, *PIP, "install", "--no-deps", REPO)
    _installed_command_works(empty_env, tmp_path)


def test_the_wheel_carries_the_licence_and_the_runner_sdk(wheel: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert "continuity_runner/signing.py" in names
    assert any(n.startswith("services/console/templates/") for n in names)
    assert any(n.startswith("shared/records/scripts/") and n.endswith(".lua") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata
