"""The ack-reply reader agrees with nats-py's own metadata parser on both subject forms."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg

from shared.platform.bus.ack_reply import stored_at, stream_seq

V1 = "$JS.ACK.CONTINUITY_EVENTS.classifier.2.41907.38.1764581940123456789.17"
V2 = "$JS.ACK._.ACCHASH.CONTINUITY_EVENTS.classifier.3.41907.39.1764581940123456789.0.rand0m"
V2_SHORT = "$JS.ACK.hub.ACCHASH.CONTINUITY_EVENTS.classifier.1.7.7.1764581940000000000.5"


@pytest.mark.parametrize("reply", [V1, V2, V2_SHORT])
def test_reads_what_nats_py_reads(reply: str) -> None:
    metadata = Msg.Metadata._from_reply(reply)
    assert stream_seq(reply) == metadata.sequence.stream
    at = stored_at(reply)
    assert at is not None
    assert at == pytest.approx(metadata.timestamp.timestamp(), abs=1e-6)


def test_timestamp_keeps_nanosecond_token_in_seconds() -> None:
    assert stored_at(V1) == pytest.approx(1764581940.123456789, abs=1e-6)
    assert stream_seq(V1) == 41907


@pytest.mark.parametrize(
    "reply",
    [
        None,
        "",
        "_INBOX.abc",
        "$JS.ACK.s.c.1.2.3",  # too few tokens
        "$JS.ACK.s.c.1.2.3.4.5.6",  # ten tokens: neither form
        "$JS.NAK.s.c.1.2.3.4.5",
        "$JS.ACK.s.c.1.x.3.y.5",  # not numbers
        "continuity.events.r1.resume_failed.a.b.c.d.e",
    ],
)
def test_anything_else_is_none(reply: str | None) -> None:
    assert stored_at(reply) is None
    assert stream_seq(reply) is None
