"""Pure helpers of finding and fixing runs: durations, the runs index's order and buckets,
the dead-letter checks before a replay, and what is shown of a dead letter's bytes."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest

from continuity.cli.dead import body_text, printable, replay_refusal
from continuity.cli.run_filters import duration
from services.reconciliation.runs_index import BUCKETS, bucket_keys, bucket_of
from services.reconciliation.step import version_of
from shared.contract import RunEntry, SessionRef
from shared.contract.types import Action


def entry(at: str, attempt: int = 1, action: Action = "operator") -> RunEntry:
    return RunEntry(
        run_id="run-1",
        runner_id="r1",
        session=SessionRef(tenant="t", conversation_id="c", agent_id="a"),
        attempt=attempt,
        status="operator",
        action=action,
        reason="native_event_replay_conflict",
        decision_id="run-1:1:operator",
        updated_at=at,
    )


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("10m", 600), ("2h", 7200), ("7d", 604800)])
def test_durations(text: str, seconds: int) -> None:
    assert duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "10", "m", "10 m", "-5m", "1.5h", "10M", "10m\n"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


def test_versions_order_by_time_then_attempt_then_a_continuation_last() -> None:
    ordered = [
        entry("2026-11-30T12:00:00.000Z", 3),
        entry("2026-11-30T12:00:00.001Z", 1),
        entry("2026-11-30T12:00:00.001Z", 2),
        entry("2026-11-30T12:00:00.001Z", 2, "continue_fresh"),
        entry("2026-11-30T12:00:00.5Z", 1),  # a shorter fraction is still read as a time
        entry("2026-12-01T00:00:00+00:00", 1),
    ]
    versions = [version_of(e) for e in ordered]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)


def test_buckets_are_stable_and_each_has_its_own_hash_tag() -> None:
    assert bucket_of("run-1") == bucket_of("run-1")
    assert {bucket_of(f"run-{i}") for i in range(2000)} == set(range(BUCKETS))
    for b in range(BUCKETS):
        tags = {k[k.index("{") : k.index("}") + 1] for k in bucket_keys(b)}
        assert tags == {f"{{runs-{b}}}"}


def dead(**headers: str) -> dict[str, str]:
    base = {
        "Continuity-Truncated": "false",
        "Continuity-Original-Size": "2",
        "Continuity-Original-Subject": "continuity.events.r1.resume_failed",
        "Continuity-Original-Msg-Id": "ev-1",
    }
    return {**base, **headers}


def test_a_whole_dead_letter_of_a_consumed_subject_with_its_id_is_replayable() -> None:
    assert replay_refusal(dead(), b"{}") is None
    assert replay_refusal(dead(**{"Continuity-Original-Subject": "continuity.work.archive"}), b"{}") is None


@pytest.mark.parametrize(
    ("headers", "body", "code"),
    [
        ({"Continuity-Truncated": "true"}, b"{}", "truncated"),
        ({}, b"{", "truncated"),  # shorter than the original size
        ({"Continuity-Truncated": ""}, b"{}", "truncated"),
        ({"Continuity-Original-Subject": "continuity.decisions.r1"}, b"{}", "not_replayable"),
        ({"Continuity-Original-Subject": ""}, b"{}", "not_replayable"),
        ({"Continuity-Original-Msg-Id": ""}, b"{}", "no_original_msg_id"),
    ],
)
def test_what_cannot_be_replayed_is_refused(headers: dict[str, str], body: bytes, code: str) -> None:
    refusal = replay_refusal(dead(**headers), body)
    assert refusal is not None and refusal.code == code


def test_a_body_is_shown_as_text_only_when_printable() -> None:
    assert body_text(b'{"a": "b"}\n') == '{"a": "b"}\n'
    assert body_text("é".encode()) == "é"
    assert body_text(b"\xff\xfe") is None
    assert body_text(b"ok\x1b[2J") is None
    assert printable("a\x1b[31mb\nc") == "a?[31mb?c"
