"""What docs/integrate-a-runner.md and the SDKs' READMEs say about installing the runner SDKs
matches their packages: the names and versions of the wheel and the tarball, the licence (the
Apache License 2.0 text, as at the repository root), the changelogs, `npm pack` building first,
and the default bound of the first connection. (The packages themselves are built, installed and
used by tests/integration/test_sdk_python_package.py and sdk/typescript/test/package.test.ts.)"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from continuity_runner import RunnerOptions

ROOT = Path(__file__).resolve().parents[2]
PYTHON, TYPESCRIPT = ROOT / "sdk" / "python", ROOT / "sdk" / "typescript"
DOC = (ROOT / "docs" / "integrate-a-runner.md").read_text()
PROJECT = tomllib.loads((PYTHON / "pyproject.toml").read_text())["project"]
PACKAGE = json.loads((TYPESCRIPT / "package.json").read_text())


def _section(title: str) -> str:
    start = DOC.index(f"## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else len(DOC)]


def test_the_install_section_names_the_packages_as_they_are_built() -> None:
    install = _section("Install")
    wheel = f"continuity_runner-{PROJECT['version']}-py3-none-any.whl"
    # npm names the tarball of `@scope/name` `scope-name-<version>.tgz`.
    tarball = f"{PACKAGE['name'].lstrip('@').replace('/', '-')}-{PACKAGE['version']}.tgz"
    assert PROJECT["name"] in install and PACKAGE["name"] in install
    assert "pip install ./sdk/python" in install and f"pip install dist/{wheel}" in install
    assert "npm pack" in install and f"npm install /path/to/{tarball}" in install
    assert "python -m build --outdir dist sdk/python" in install
    # Not published: nothing tells a runner to install by name from an index.
    assert not re.search(r"pip install continuity-runner\b", DOC)
    for readme in (PYTHON / "README.md", TYPESCRIPT / "README.md"):
        text = readme.read_text()
        assert (wheel in text) or (tarball in text), readme
        assert not re.search(r"pip install continuity-runner\b", text), readme


def test_both_packages_are_apache_licensed_and_versioned_with_a_changelog() -> None:
    root = (ROOT / "LICENSE").read_text()
    assert "Apache License" in root and "Version 2.0, January 2004" in root
    for sdk in (PYTHON, TYPESCRIPT):
        assert (sdk / "LICENSE").read_text() == root, sdk
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    assert PACKAGE["license"] == "Apache-2.0" and "private" not in PACKAGE
    assert PACKAGE["scripts"]["prepack"] == "npm run build"  # `npm pack` packs a fresh build
    assert {"dist/src", "CHANGELOG.md"} <= set(PACKAGE["files"])
    for sdk, version in ((PYTHON, PROJECT["version"]), (TYPESCRIPT, PACKAGE["version"])):
        changelog = (sdk / "CHANGELOG.md").read_text()
        first = re.search(r"^## (\S+)", changelog, re.MULTILINE)
        assert first is not None and first.group(1) == version, sdk
    lock = json.loads((TYPESCRIPT / "package-lock.json").read_text())
    assert lock["packages"][""]["license"] == "Apache-2.0"
    assert "resolved" not in (TYPESCRIPT / "package-lock.json").read_text()


def test_the_documented_bound_of_the_first_connection_is_both_sdks_default() -> None:
    assert "`connect_timeout` seconds (5 by default" in DOC
    assert "`connectTimeout` (seconds,\n  default 5)" in DOC
    assert RunnerOptions(runner_id="r").connect_timeout == 5.0
    options = (TYPESCRIPT / "src" / "options.ts").read_text()
    assert re.search(r'positive\(options\.connectTimeout, 5, "connectTimeout"\)', options)
