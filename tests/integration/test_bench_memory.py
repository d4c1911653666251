"""`continuity bench memory --json` with small numbers: the four services as processes on servers
of its own, the simulator's fleet playing runs to their end, Redis's memory growth per finished
run explained by key family, and `continuity memory estimate` of the same mix within 10% of it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from continuity.tools.bench.memory import RUN_FAMILIES, family
from shared.records import keys

SK = "acme/conv-1/codex"


def test_every_key_of_the_layout_falls_in_its_family() -> None:
    assert family(keys.run(SK, "run-1")) == "run"
    assert family(keys.run_decisions(SK, "run-1")) == "decisions"
    assert family(keys.reconciliation_history(SK, "run-1")) == "reconciliation history"
    assert family(keys.reconciliation(SK, "run-1")) == "reconciliation"
    assert family(keys.held_archive(SK, "ns-1")) == "archive held"
    assert family(keys.archive_copy(SK, "arch-1")) == "archive copy"
    assert family(keys.run_index("run-1")) == "run lookup"
    assert family(keys.runs_index_listing(15, "recovered")) == "runs index listings"
    assert family(keys.runs_index_listing(3)) == "runs index listings"
    assert family(keys.runs_index_entries(7)) == "runs index entries"
    assert family(keys.tenant_runs("acme")) == "stored runs"
    assert family(keys.recovery_budget("acme", 29_000_001)) == "recovery budget"
    assert family(keys.reconciliations_delivered(2)) == "reconciliation listing"
    assert family(keys.RUNNERS_AUDIT) == "runner directory"
    assert family("continuity:elsewhere:{x}") == "other continuity:elsewhere:"


def test_bench_memory_measures_finished_runs_and_the_estimate_agrees_within_ten_percent() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "continuity", "bench", "memory", "--runs", "100", "--warmup", "20", "--json"],
        capture_output=True,
        timeout=150,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result = json.loads(proc.stdout)
    assert result["contradictions"] == 0
    # Runs of the dead-letter scenarios get no decision; every other run ends.
    assert 60 <= result["finished_runs"] <= 100, result["statuses"]
    assert set(result["statuses"]) <= {
        "recovered",
        "recovered_replaced",
        "recovered_fresh",
        "failed",
        "abandoned",
    }
    families = result["families"]
    assert sum(f["bytes"] for f in families.values()) == result["keys_bytes"]
    for name in ("run", "decisions", "audit", "runs index entries", "session", "archive copy"):
        assert families[name]["bytes"] > 0, name
    assert families["run"]["keys"] == result["finished_runs"]
    measured = result["run_bytes_per_finished_run"]
    run_keys = sum(f["bytes"] for name, f in families.items() if name in RUN_FAMILIES)
    assert measured == pytest.approx(run_keys * result["overhead"] / result["finished_runs"], rel=0.002)
    assert 1.0 <= result["overhead"] < 1.5
    # The estimate of as many runs of the same mix, recorded with the services' scripts alone.
    estimate = result["estimate"]
    assert estimate["runs"] == result["finished_runs"]
    assert 0.9 <= estimate["ratio"] <= 1.1, (estimate, measured)
    # After the linger the estimate is printed beside the measured; at this small a sample Redis
    # keeps the few runs' sets in other encodings than at 800 runs, so only its presence is checked.
    assert estimate["run_bytes_after_linger"] > 0 and estimate["ratio_after_linger"] > 0
    # After the linger (brought forward), the finished runs' own records are gone from Redis and
    # CONTINUITY_HISTORY holds one copy of each (contract 9.14).
    after = result["families_after_linger"]
    for name in ("run", "decisions", "audit", "run lookup", "archive progress", "runs index entries"):
        assert after.get(name, 0) <= 0, (name, after)
    assert result["run_bytes_after_linger"] < measured / 4
    assert result["run_bytes_after_linger"] <= result["run_bytes_steady_state"] < measured
    assert result["history_copies"] == result["finished_runs"]
    # and lists each, with its pointer (the runs index entry left Redis once it did).
    assert result["history_listings"] == result["finished_runs"]
    assert result["history_messages"] == 3 * result["finished_runs"]
    assert result["history_bytes_per_run"] > 0
