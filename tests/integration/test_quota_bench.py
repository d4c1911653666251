"""`continuity bench quotas --json` with small numbers: one replica, then two, each round's
events all accounted for as decisions or refusals, and the figures in one JSON object (their
values are the benchmark's to print, never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_quotas_accounts_for_every_event_of_both_rounds() -> None:
    command = [sys.executable, "-m", "continuity", "bench", "quotas", "--json"]
    command += ["--rate", "20", "--burst", "5", "--flood-rate", "60", "--seconds", "2", "--replicas", "2"]
    proc = subprocess.run(command, capture_output=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result = json.loads(proc.stdout)
    assert [r["replicas"] for r in result["rounds"]] == [1, 2]
    for r in result["rounds"]:
        assert r["published"] == 120
        assert r["accepted"] + r["refused"] == 120, r
        assert r["accepted"] >= 5, r  # at least the burst
        assert r["configured_per_s"] == 20
        assert set(r) >= {"accepted_per_s", "ratio", "handled_s", "goal_met"}
    assert result["nats_version"] and result["servers"]["redis_version"]


def test_bench_quotas_refuses_a_flood_not_above_the_rate() -> None:
    command = [sys.executable, "-m", "continuity", "bench", "quotas", "--rate", "50", "--flood-rate", "50"]
    proc = subprocess.run(command, capture_output=True, timeout=60, check=False)
    assert proc.returncode == 2 and b"--flood-rate above it" in proc.stderr
