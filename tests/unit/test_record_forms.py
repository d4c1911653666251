"""The three stored forms of the version-2 generation field, read from the hash alone."""

from __future__ import annotations

import hashlib

import pytest

from shared.records.session import V1_FIELDS, StoredSession, binding_stamp, generation_binding

V1 = {name: f"value of {name}" for name in V1_FIELDS}


def record(**extra: bytes) -> dict[bytes, bytes]:
    raw = {k.encode(): v.encode() for k, v in V1.items()}
    raw.update({k.encode(): v for k, v in extra.items()})
    return raw


def digest() -> bytes:
    return hashlib.sha256("\n".join(V1[n] for n in V1_FIELDS).encode()).digest()


FORMS = {
    "text": record(generation=generation_binding(V1)[:16].encode() + b"gen-1"),
    "raw bytes": record(generation=digest()[:16] + b"gen-1"),
    "long": record(compatibility_generation=b"gen-1", generation_binding=generation_binding(V1).encode()),
}


def test_a_commit_stamps_16_hex_characters_of_the_contract_binding() -> None:
    assert binding_stamp(V1) == generation_binding(V1)[:16].encode()
    assert binding_stamp(V1).decode("ascii").isalnum()


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
    raw = record(generation=binding_stamp(other) + b"gen-1")
    assert StoredSession.from_hash(raw).generation_trusted is False


def test_the_previous_release_reads_the_text_form_as_an_untrusted_generation() -> None:
    """Its rule, as it shipped: the first 16 bytes are compared with the raw digest. So while
    both releases run, a record committed by this one reseeds once when the older one reads it."""
    compact = FORMS["text"][b"generation"]
    generation, trusted = compact[16:].decode(), compact[:16] == digest()[:16]
    assert (generation, trusted) == ("gen-1", False)
