"""Property tests of the generation binding rule (contract 3.1), on the record alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.records.session import V1_FIELDS, StoredSession, generation_binding

values = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=80)
v1_maps = st.fixed_dictionaries({name: values for name in V1_FIELDS})


def stored(v1: dict[str, str], generation: str, binding: str) -> StoredSession:
    raw = {k.encode(): v.encode() for k, v in v1.items()}
    raw.update({b"compatibility_generation": generation.encode(), b"generation_binding": binding.encode()})
    return StoredSession.from_hash(raw)


@given(v1_maps)
def test_a_generation_stamped_with_these_fields_is_trusted(v1: dict[str, str]) -> None:
    assert stored(v1, "gen-1", generation_binding(v1)).generation_trusted


@given(v1_maps, st.sampled_from(V1_FIELDS), values)
def test_any_change_of_any_v1_field_breaks_trust(v1: dict[str, str], field: str, new: str) -> None:
    binding = generation_binding(v1)
    changed = dict(v1, **{field: new})
    assert stored(changed, "gen-1", binding).generation_trusted == (new == v1[field])


@given(v1_maps)
def test_no_generation_is_never_trusted(v1: dict[str, str]) -> None:
    assert not stored(v1, "", generation_binding(v1)).generation_trusted


one_line = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\n"), max_size=80
)


@given(st.fixed_dictionaries({name: one_line for name in V1_FIELDS}), st.sampled_from(V1_FIELDS))
def test_moving_a_value_between_fields_breaks_trust(v1: dict[str, str], field: str) -> None:
    """For one-line values (the contract joins with newlines, so a value that itself holds a
    newline can shift across a boundary unseen), moving text between fields changes the hash."""
    i = V1_FIELDS.index(field)
    if i + 1 == len(V1_FIELDS) or not v1[field]:
        return
    nxt = V1_FIELDS[i + 1]
    shifted = dict(v1, **{field: v1[field][:-1], nxt: v1[field][-1] + v1[nxt]})
    assert generation_binding(shifted) != generation_binding(v1)


def test_binding_is_the_contract_hash() -> None:
    import hashlib

    v1 = {name: f"v-{name}" for name in V1_FIELDS}
    expected = hashlib.sha256("\n".join(f"v-{n}" for n in V1_FIELDS).encode()).hexdigest()
    assert generation_binding(v1) == expected
    missing = dict(v1)
    del missing["cursor"]
    assert generation_binding(missing) == generation_binding(dict(v1, cursor=""))


@given(v1_maps, st.sampled_from(V1_FIELDS), values)
def test_compact_stamp_follows_the_same_rule(v1: dict[str, str], field: str, new: str) -> None:
    from shared.records.session import binding_stamp

    raw = {k.encode(): v.encode() for k, v in v1.items()}
    raw[b"g"] = binding_stamp(v1) + b"gen-1"
    record = StoredSession.from_hash(raw)
    assert (record.generation, record.generation_trusted) == ("gen-1", True)
    raw[field.encode()] = new.encode()
    assert StoredSession.from_hash(raw).generation_trusted == (new == v1[field])
