"""The reconciliation list's cursor: an opaque position that round-trips exactly, and a token
that no page returned is refused."""

from __future__ import annotations

import pytest

from services.reconciliation.cursor import BadCursor, decode_cursor, encode_cursor
from services.reconciliation.step import member
from shared.contract.limits import CURSOR_CHARS


def test_a_cursor_round_trips_the_position_exactly() -> None:
    name = member("t" * 128 + "/" + "c" * 128 + "/" + "a" * 128, "r" * 128).encode()
    score = 1796040000.123
    cursor = encode_cursor(score, name)
    assert decode_cursor(cursor) == (score, name)
    assert len(cursor) <= CURSOR_CHARS  # the longest member still fits the request's field
    assert cursor.isascii() and "\n" not in cursor


@pytest.mark.parametrize("bad", ["", "!!!", "bm90IGpzb24", "WzEsMiwzXQ", "eyJhIjoxfQ", "W10"])
def test_a_token_no_page_returned_is_refused(bad: str) -> None:
    with pytest.raises(BadCursor):
        decode_cursor(bad)
