"""Hiding the stored compatibility generation in a runner's archive output (contract sections 1
and 5): the value never reaches an archive-failed detail, whatever form the record stores it in."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from services.archiver import remote
from services.archiver.scrub import scrub
from shared.contract.redaction import DETAIL_LIMIT, REDACTED
from shared.records.session import binding_stamp, every_generation, generation_binding

GENERATION = "dsh-2026.11.3-p7"
V1 = {
    "native_session_id": "ns-1",
    "adapter": "deepseek-harness",
    "model": "m-1",
    "cwd": "/w",
    "cursor": "c-1",
    "prompt_hash": "ph",
    "checkpoint_policy": "allow_replacement_after_resume_failure",
    "updated_at": "2026-11-30T12:00:00.000Z",
}
TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-"


def _hash(**fields: str | bytes) -> dict[bytes, bytes]:
    raw = {**V1, **fields}
    return {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in raw.items()}


def test_the_compact_form_is_read_trusted_or_not() -> None:
    stamp = binding_stamp(V1)
    assert every_generation(_hash(g=stamp + GENERATION.encode())) == {GENERATION}
    # A rewritten version-1 field makes it untrusted; it is still hidden.
    stale = _hash(g=stamp + GENERATION.encode(), cwd="/elsewhere")
    assert every_generation(stale) == {GENERATION}


def test_the_earlier_forms_are_read_and_every_form_together_is_read() -> None:
    long_form = _hash(compatibility_generation=GENERATION, generation_binding=generation_binding(V1))
    assert every_generation(long_form) == {GENERATION}
    earlier = _hash(generation=generation_binding(V1)[:16] + GENERATION)
    assert every_generation(earlier) == {GENERATION}
    every = _hash(
        g=binding_stamp(V1) + b"gen-new-1",
        generation=generation_binding(V1)[:16] + "gen-mid-1",
        compatibility_generation="gen-old-1",
    )
    assert every_generation(every) == {"gen-new-1", "gen-mid-1", "gen-old-1"}


def test_no_record_or_no_generation_hides_nothing() -> None:
    assert every_generation({}) == frozenset()
    assert every_generation(_hash()) == frozenset()
    assert scrub("exit 1: nothing to hide", every_generation(_hash())) == "exit 1: nothing to hide"


def test_every_occurrence_in_any_case_and_a_cut_off_prefix_at_the_end_are_hidden() -> None:
    output = f"ready {GENERATION}; was {GENERATION.upper()}, rolled back from {GENERATION[:10]}"
    hidden = scrub(output, {GENERATION})
    assert hidden == f"ready {REDACTED}; was {REDACTED}, rolled back from {REDACTED}"
    # A short prefix in the middle of ordinary text is ordinary text.
    assert scrub("dsh-2 is fine", {GENERATION}) == "dsh-2 is fine"


def test_a_generation_inside_another_is_hidden_whole() -> None:
    assert scrub("gen-1-hotfix and gen-1", {"gen-1", "gen-1-hotfix"}) == f"{REDACTED} and {REDACTED}"


def test_the_detail_is_hidden_before_it_is_redacted_and_cut() -> None:
    # The generation straddles the 512-character cut: cutting first would leave its start.
    head = "runner_continuity_break_archive_failed: exit=1 timedOut=false "
    output = "x" * (DETAIL_LIMIT - 8 - len(head)) + GENERATION + " " + "y" * 100
    assert (head + output)[:DETAIL_LIMIT].endswith(GENERATION[:8])
    detail = remote.result(1, False, output, {GENERATION}).detail
    assert len(detail) <= DETAIL_LIMIT
    assert GENERATION[:8] not in detail
    assert detail.startswith("runner_continuity_break_archive_failed: exit=1 timedOut=false ")
    # A success has no detail at all.
    assert remote.result(0, False, GENERATION, {GENERATION}).detail == ""


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    generation=st.text(TOKEN_CHARS, min_size=1, max_size=128),
    before=st.text(max_size=600),
    after=st.text(max_size=600),
    upper=st.booleans(),
)
def test_no_stored_generation_survives_in_a_detail(
    generation: str, before: str, after: str, upper: bool
) -> None:
    # A value that the marker itself spells cannot be told apart from it.
    assume(generation.lower() not in REDACTED.lower())
    shown = generation.upper() if upper else generation
    detail = remote.result(1, False, before + shown + after, {generation}).detail
    head = "runner_continuity_break_archive_failed: exit=1 timedOut=false"
    assert detail.startswith(head)
    assert generation.lower() not in detail[len(head) :].lower()
