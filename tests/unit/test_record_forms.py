"""The stored forms of the version-2 generation (contract 9.6), read from the hash alone: the
`g` field a commit writes, the `generation` field of earlier releases (a text stamp, or raw
bytes before it), and the contract's long form."""

from __future__ import annotations

import base64
import hashlib

import pytest

from shared.records.session import STAMP_CHARS, V1_FIELDS, StoredSession, binding_stamp, generation_binding

V1 = {name: f"value of {name}" for name in V1_FIELDS}


def record(**extra: bytes) -> dict[bytes, bytes]:
    raw = {k.encode(): v.encode() for k, v in V1.items()}
    raw.update({k.encode(): v for k, v in extra.items()})
    return raw


def digest() -> bytes:
    return hashlib.sha256("\n".join(V1[n] for n in V1_FIELDS).encode()).digest()


FORMS = {
    "g": record(g=binding_stamp(V1) + b"gen-1"),
    "text": record(generation=generation_binding(V1)[:16].encode() + b"gen-1"),
    "raw bytes": record(generation=digest()[:16] + b"gen-1"),
    "long": record(compatibility_generation=b"gen-1", generation_binding=generation_binding(V1).encode()),
}


def test_a_commit_stamps_64_bits_of_the_contract_binding_as_11_base64url_characters() -> None:
    stamp = binding_stamp(V1)
    assert len(stamp) == STAMP_CHARS == 11
    assert base64.urlsafe_b64decode(stamp + b"=") == bytes.fromhex(generation_binding(V1)[:16])
    assert stamp.decode("ascii").replace("-", "").replace("_", "").isalnum()


@pytest.mark.parametrize("form", FORMS)
def test_every_form_is_trusted_while_the_version_1_fields_are_unchanged(form: str) -> None:
    stored = StoredSession.from_hash(FORMS[form])
    assert (stored.generation, stored.generation_trusted) == ("gen-1", True)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("field", V1_FIELDS)
def test_every_form_is_untrusted_after_a_rewrite_of_any_version_1_field(form: str, field: str) -> None:
    raw = dict(FORMS[form])
    raw[field.encode()] = b"rewritten by an older release"
    stored = StoredSession.from_hash(raw)
    assert (stored.generation, stored.generation_trusted) == ("gen-1", False)


def test_a_stamp_of_another_record_is_not_trusted() -> None:
    other = dict(V1, cursor="another")
    raw = record(g=binding_stamp(other) + b"gen-1")
    assert StoredSession.from_hash(raw).generation_trusted is False


def test_an_earlier_release_committing_after_this_one_is_read_by_its_binding() -> None:
    """An earlier release rewrites the version-1 fields and its own `generation` field, and
    leaves `g` as it was: `g` no longer matches the binding, the earlier field does, and it is
    the generation read. Before that commit, `g` is the one trusted."""
    rewritten = {**V1, "cursor": "turn 9"}
    raw = record(g=binding_stamp(V1) + b"gen-new")
    assert StoredSession.from_hash(raw).generation == "gen-new"
    raw[b"cursor"] = b"turn 9"
    raw[b"generation"] = generation_binding(rewritten)[:16].encode() + b"gen-old"
    stored = StoredSession.from_hash(raw)
    assert (stored.generation, stored.generation_trusted) == ("gen-old", True)
    # Neither bound: the field this release writes is the one read, untrusted.
    raw[b"cursor"] = b"turn 10"
    stored = StoredSession.from_hash(raw)
    assert (stored.generation, stored.generation_trusted) == ("gen-new", False)


def test_the_previous_release_reads_a_record_of_this_one_as_no_generation() -> None:
    """Its rule, as it shipped: the generation is the `generation` field after a stamp of 16 hex
    characters; a record committed by this one has no such field. So while both releases run,
    a record committed by this one reseeds once when the older one reads it."""
    assert b"generation" not in FORMS["g"]


def test_the_release_before_it_reads_the_text_form_as_an_untrusted_generation() -> None:
    """Its rule, as it shipped: the first 16 bytes are compared with the raw digest."""
    compact = FORMS["text"][b"generation"]
    generation, trusted = compact[16:].decode(), compact[:16] == digest()[:16]
    assert (generation, trusted) == ("gen-1", False)
