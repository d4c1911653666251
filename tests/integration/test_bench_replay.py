"""`continuity bench replay --json` with small numbers: a reconciliation process on embedded
servers replays what was recorded, and one JSON object carries the figures."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_replay_prints_one_json_object_with_its_figures() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "continuity", "bench", "replay", "--runs", "300", "--json"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result = json.loads(proc.stdout)
    # Every recorded decision replayed; the running policy changes none, the candidate some.
    assert result["replayed"] == 300 and result["running_unchanged"] is True
    assert 0 < result["changed"] < 300
    for key in ("service_running_per_s", "service_candidate_per_s", "raw_read_per_s", "rule_only_per_s"):
        assert isinstance(result[key], int) and result[key] > 0, key
