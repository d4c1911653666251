"""`continuity policy show|check`: the shipped policy as its file, and a file checked as a service
checks it at start (exit 0, or 2 naming the invariant)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from continuity.cli.main import main
from shared.policy import SHIPPED, load


def test_show_prints_the_shipped_policy_which_loads_back(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "show"]) == 0
    assert load(capsys.readouterr().out.encode()) == SHIPPED


def test_show_invariants_names_each(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "show", "--invariants", "--json"]) == 0
    names = [i["name"] for i in json.loads(capsys.readouterr().out)]
    assert "closed_refusal_never_replaced" in names and len(names) == 9
    assert {
        "missing_session_never_retried",
        "overflow_never_resumed_whole",
        "corrupt_transcript_never_replaced_silently",
        "busy_session_one_writer",
    } <= set(names)


def test_show_prints_the_harness_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "show"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["recovery"]}
    assert rows["4.4.10"] == {
        "id": "4.4.10",
        "classes": ["native_session_missing"],
        "action": "continue_fresh",
        "reason": "native_session_missing",
    }
    assert (rows["4.4.11"]["action"], rows["4.4.11"]["reason"]) == ("operator", "native_context_overflow")
    assert (rows["4.4.12"]["action"], rows["4.4.12"]["reason"]) == ("operator", "native_transcript_corrupt")
    assert (rows["4.4.13"]["action"], rows["4.4.13"]["reason"]) == (
        "retry_same_session",
        "native_session_busy",
    )
    assert rows["4.4.6"]["classes"] == ["unclassified", "session_busy"]
    assert rows["4.4.5"]["classes"] == ["unclassified", "session_busy"]


def test_check_passes_a_good_file_and_refuses_a_broken_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["policy", "show"])
    doc = json.loads(capsys.readouterr().out)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc))
    assert main(["policy", "check", str(good)]) == 0
    assert "every invariant holds" in capsys.readouterr().out
    next(r for r in doc["recovery"] if r["id"] == "4.4.1").update(action="retry_same_session")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert main(["policy", "check", str(bad), "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "policy_refused" and "pending_side_effect_never_retried" in error["message"]
    assert main(["policy", "check", str(tmp_path / "missing.json")]) == 2
    assert "cannot read the policy file" in capsys.readouterr().err


def test_serve_refuses_to_start_with_a_policy_that_breaks_an_invariant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    main(["policy", "show"])
    doc = json.loads(capsys.readouterr().out)
    doc["resume"] = [c for c in doc["resume"] if c["id"] != "3.3.3b"]
    bad = tmp_path / "policy.json"
    bad.write_text(json.dumps(doc))
    monkeypatch.setenv("CONTINUITY_POLICY_FILE", str(bad))
    # The check comes before any connection: nothing listens on these.
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:1")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    assert main(["serve", "classifier"]) == 2
    err = capsys.readouterr().err
    assert "continuity: policy refused: CONTINUITY_POLICY_FILE: no_resume_across_generation:" in err
