"""The harness table inside both wheels: the server's (`pip wheel .`, which carries the runner SDK)
and the runner SDK's (`pip wheel ./sdk/python`, and its wheel made from its sdist) hold
continuity_runner/harness/harnesses.json, byte for byte the canonical sdk/harnesses.json, and the
SDK installed in an empty environment reads it from its installed files."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "sdk" / "harnesses.json"
SHIPPED = "continuity_runner/harness/harnesses.json"
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]

pytestmark = pytest.mark.timeout(600)


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False, timeout=500
    )
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _wheel(source: Path, out: Path) -> Path:
    _run(*PIP, "wheel", "--no-deps", "-w", out, source)
    [built] = list(out.glob("*.whl"))
    return built


@pytest.mark.parametrize("source", [ROOT, ROOT / "sdk" / "python"], ids=["server", "runner-sdk"])
def test_each_wheel_ships_the_canonical_table(source: Path, tmp_path: Path) -> None:
    wheel = zipfile.ZipFile(_wheel(source, tmp_path))
    assert SHIPPED in wheel.namelist()
    assert wheel.read(SHIPPED) == TABLE.read_bytes()


def test_the_sdk_wheel_made_from_its_sdist_ships_it_and_the_installed_sdk_reads_it(tmp_path: Path) -> None:
    builder = tmp_path / "builder"
    venv.EnvBuilder(with_pip=False).create(builder)
    _run(*PIP, "--python", builder / "bin" / "python", "install", "build", "hatchling>=1.27")
    dist = tmp_path / "dist"
    _run(
        builder / "bin" / "python", "-m", "build", "--no-isolation", "--outdir", dist, ROOT / "sdk" / "python"
    )
    [sdist] = list(dist.glob("*.tar.gz"))
    with tarfile.open(sdist) as archive:
        inside = [m.name.split("/", 1)[1] for m in archive.getmembers()]
    assert SHIPPED in inside and "hatch_build.py" in inside
    [wheel] = list(dist.glob("*.whl"))  # `build` made it from the sdist
    assert zipfile.ZipFile(wheel).read(SHIPPED) == TABLE.read_bytes()

    target = tmp_path / "empty"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    _run(*PIP, "--python", python, "install", wheel)
    check = (
        "import json; from continuity_runner import harness; "
        "print(json.dumps({'path': str(harness.shipped_path()), 'names': harness.names(), "
        "'class': harness.adapter('opencode').assess({'exit_code': 1, 'stdout': '', "
        "'stderr': 'Error: Session not found'}).failure_class}))"
    )
    said = json.loads(_run(python, "-c", check, cwd=tmp_path))
    assert said["path"].startswith(str(target)) and said["path"].endswith(SHIPPED)
    assert said["names"][0] == "claude-code" and len(said["names"]) == 8
    assert said["class"] == "native_session_missing"
