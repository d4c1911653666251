"""`continuity bench listing` on servers of its own: the runs it lists in CONTINUITY_HISTORY are
found by every query, in the list's order, each runner's all of them."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_listing_finds_every_runner_s_runs_in_order() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "continuity",
            "bench",
            "listing",
            "--runs",
            "3000",
            "--runners",
            "100",
            "--json",
        ],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result = json.loads(proc.stdout)
    assert result["stream_messages"] == 2 * result["runs"]  # a listing and a pointer per run
    queries = result["queries"]
    assert all(q["ordered"] for q in queries.values()), queries
    for name in ("all", "status", "tenant"):
        assert queries[name]["items"] == 100, (name, queries[name])
    runner = queries["runner_every_page"]
    assert runner["items"] == result["runner_runs_expected"] == 30
    assert 0 < queries["last_hour"]["items"] < 100
    assert result["raw"]["message_get_ms"] > 0 and result["raw"]["hour_count_ms"] > 0
    assert all(len(q["ms"]) == 3 for q in queries.values())
