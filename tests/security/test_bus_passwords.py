"""The NATS passwords deploy.md makes are ones nats-server can read.

nats-server reads a variable named in its configuration (`password: $CONTINUITY_NATS_..._PASSWORD`)
as configuration: a hex password such as `12e45ab` is lexed as a malformed number and the server
does not start. deploy.md's NATS section turns the hex digits into letters; each password command
of that section is run here and its output given to nats-server's configuration check, with the
worst hex values fed through the same pipeline."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.deploy.conftest import nats_server_binary

pytestmark = pytest.mark.system

DEPLOY_MD = Path(__file__).resolve().parents[2] / "docs" / "operations" / "deploy.md"
NATS_SECTION = DEPLOY_MD.read_text().split("## 1. NATS", 1)[1].split("\n## ", 1)[0]
PIPELINES = re.findall(r"\"\$\((openssl rand -hex \d+[^)]*)\)\"", NATS_SECTION)
WORST = ["12345", "12e45ab", "3e10", "0123456789"]
"""Hex outputs nats-server may not read as a string when bare: all digits (an integer, on every
release here) and digits with an `e` (a malformed number, on 2.9 and 2.10)."""


def _valid(tmp_path: Path, password: str) -> bool:
    conf = tmp_path / "check.conf"
    conf.write_text("port: -1\nauthorization { users: [ { user: a, password: $PW } ] }\n")
    checked = subprocess.run(
        [nats_server_binary(), "-c", str(conf), "-t"],
        env={**os.environ, "PW": password},
        capture_output=True,
        timeout=30,
        check=False,
    )
    return checked.returncode == 0


def test_the_nats_section_makes_every_password_through_one_pipeline() -> None:
    auth = (DEPLOY_MD.parents[2] / "deploy" / "nats" / "auth.conf").read_text()
    users = set(re.findall(r"\$CONTINUITY_NATS_\w+_PASSWORD", auth))
    assert len(users) == 8  # the services, operator, console, system and monitor
    assert len(PIPELINES) == len(users) + 1, PIPELINES  # every user's and the routes'
    assert all(p.endswith("| tr 0-9 g-p") for p in PIPELINES), PIPELINES


def test_a_bare_hex_value_can_stop_the_server_and_the_pipeline_makes_every_one_readable(
    tmp_path: Path,
) -> None:
    assert not _valid(tmp_path, "12345")  # the hazard, on the release the tests run
    for value in WORST:
        tr = subprocess.run(["tr", "0-9", "g-p"], input=value, capture_output=True, text=True, check=True)
        assert _valid(tmp_path, tr.stdout), tr.stdout


def test_every_password_the_section_makes_is_read_by_the_server(tmp_path: Path) -> None:
    for pipeline in PIPELINES:
        for _ in range(20):
            made = subprocess.run(["sh", "-c", pipeline], capture_output=True, text=True, check=True).stdout
            assert re.fullmatch(r"[a-p]+\n?", made), made
            assert _valid(tmp_path, made.strip())
