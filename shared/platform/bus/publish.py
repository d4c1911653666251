"""JetStream publication with de-duplication ids, a size check, and bounded dead letters.

The server closes a connection that sends a message larger than its `max_payload` (headers
included), and nats-py then gives up on that connection for good. nats-py itself only compares
the payload, without headers, so every publish here counts both, as the server does, and raises
`PayloadTooLarge` instead of sending.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Mapping
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared.contract.times import now_rfc3339
from shared.platform import metrics, tracing
from shared.platform.bus import nats_private

DEAD_REASON_HEADER = "Continuity-Dead-Reason"
DEAD_SUBJECT_HEADER = "Continuity-Original-Subject"
DEAD_SERVICE_HEADER = "Continuity-Service"
DEAD_AT_HEADER = "Continuity-Dead-At"
DEAD_SIZE_HEADER = "Continuity-Original-Size"
DEAD_TRUNCATED_HEADER = "Continuity-Truncated"
DEAD_MSG_ID_HEADER = "Continuity-Original-Msg-Id"
"""The original's `Nats-Msg-Id`, so a replay is de-duplicated like the original was."""

DEAD_COPY_MAX = 64 * 1024
"""At most this many bytes of the original are kept in a dead letter (its first bytes)."""

TOO_LARGE_REASON = "payload_too_large"
"""The dead-letter reason of a message that could never be published."""

_HEADER_LINE = len(b"NATS/1.0\r\n")
# A sender's message id is kept only as visible ASCII of a bounded length: anything else could
# not be sent back unchanged as a header, so it is left out rather than altered.
_PLAIN_ID = re.compile(r"[!-~]{1,1024}\Z")


class _PubAckReply(msgspec.Struct):
    """The one field of JetStream's publish reply that matters here: an error, if any."""

    error: dict[str, Any] | None = None


_decode_ack = msgspec.json.Decoder(_PubAckReply).decode


class PayloadTooLarge(Exception):
    """A message (payload plus headers) larger than the server's `max_payload`: it was not sent,
    and sending it again would fail the same way."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message of {size} bytes exceeds the server's limit of {limit} bytes")
        self.size = size
        self.limit = limit


def header_size(headers: Mapping[str, str] | None) -> int:
    """The bytes of the header block nats-py writes for `headers` (`NATS/1.0`, one
    `key: value` line each, an empty line), which the server counts into the message's size.
    nats-py strips each key and value and writes a line break inside a value as a space: the
    same number of bytes, so the value is measured as it is (a translation costs 1 to 2 µs a
    header, on every publication)."""
    if not headers:
        return 0
    size = _HEADER_LINE + 2
    for key, value in headers.items():
        k = key.strip()
        if k:
            size += len(k.encode()) + 2 + len(value.strip().encode()) + 2
    return size


def max_payload(js: JetStreamContext) -> int:
    """The limit the server announced on this connection (1 MiB unless configured)."""
    return nats_private.connection(js).max_payload


def check_size(js: JetStreamContext, payload: bytes, headers: Mapping[str, str] | None) -> None:
    size = len(payload) + header_size(headers)
    limit = max_payload(js)
    if size > limit:
        raise PayloadTooLarge(size, limit)


async def publish(
    js: JetStreamContext,
    subject: str,
    payload: bytes,
    msg_id: str,
    timeout: float = 5.0,
    traceparent: str = "",
) -> None:
    """Publish once: JetStream drops a re-send with the same `Nats-Msg-Id` in its window.
    Raises `PayloadTooLarge`, sending nothing, for a message the server would refuse. A
    `traceparent` goes along as its header (shared/platform/tracing.py)."""
    headers = tracing.headers(traceparent, {"Nats-Msg-Id": msg_id})
    check_size(js, payload, headers)
    await _stored(js, subject, payload, headers, timeout)


async def _stored(
    js: JetStreamContext, subject: str, payload: bytes, headers: dict[str, str], timeout: float
) -> None:
    """`js.publish` minus what nobody here reads: the same request and the same errors (no
    stream: `NoStreamResponseError`; an error reply: an `APIError`; no reply in time:
    `nats.errors.TimeoutError`), without building a `PubAck` from `json.loads` and dataclass
    fields: about a tenth of the client's CPU per JetStream publish."""
    msg = await _request(nats_private.connection(js), subject, payload, headers, timeout)
    if msg.headers and msg.headers.get("Status") == "503":  # no stream takes the subject
        raise nats.js.errors.NoStreamResponseError
    reply = _decode_ack(msg.data)
    if reply.error is not None:
        nats.js.errors.APIError.from_error(reply.error)  # raises the error's own class


_tokens = itertools.count()


def _expire(reply: asyncio.Future[Msg]) -> None:
    if not reply.done():
        reply.set_exception(nats.errors.TimeoutError())


async def _request(nc: Client, subject: str, payload: bytes, headers: dict[str, str], timeout: float) -> Msg:
    """`nc.request` over the connection's one reply subscription, as nats-py sends it, with a
    timer instead of `asyncio.wait_for` (which adds a second future, callbacks and a task step
    to every publish), and a counter as the reply token: unique in this process, and never 22
    characters long like the NUIDs of nats-py's own requests over the same subscription, so the
    two cannot meet (a NUID costs 2.7 µs of Python, the counter 0.15)."""
    if nc.is_draining_pubs:
        raise nats.errors.ConnectionDrainingError
    prefix = nats_private.reply_prefix(nc) or await nats_private.open_replies(nc)
    token = f"p{next(_tokens)}"
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[Msg] = loop.create_future()
    nats_private.expect_reply(nc, token, reply)
    timer = loop.call_later(timeout, _expire, reply)
    try:
        await nc.publish(subject, payload, reply=prefix + token, headers=headers)
        return await reply
    finally:
        timer.cancel()
        nats_private.forget_reply(nc, token)


async def dead_letter(
    js: JetStreamContext,
    dead_subject: str,
    *,
    reason: str,
    original_subject: str,
    payload: bytes,
    msg_id: str,
    service: str,
    original_msg_id: str | None = None,
) -> None:
    """Park a message with a closed, sanitized reason in headers and a bounded copy of its bytes:
    the first `DEAD_COPY_MAX` of them (less if the server's limit is lower), so that the dead
    letter itself always fits. A shortened copy says so in headers, with the original size.
    The original's `Nats-Msg-Id` is kept when it is a plain header value (a replay reuses it)."""
    headers = {
        "Nats-Msg-Id": msg_id,
        DEAD_REASON_HEADER: reason,
        DEAD_SUBJECT_HEADER: original_subject,
        DEAD_SERVICE_HEADER: service,
        DEAD_AT_HEADER: now_rfc3339(),
        DEAD_SIZE_HEADER: str(len(payload)),
        DEAD_TRUNCATED_HEADER: "false",
    }
    if original_msg_id is not None and _PLAIN_ID.match(original_msg_id):
        headers[DEAD_MSG_ID_HEADER] = original_msg_id
    headers = tracing.headers(tracing.current(), headers)  # the work that set it aside (tracing on)
    room = max(0, min(DEAD_COPY_MAX, max_payload(js) - header_size(headers)))
    if len(payload) > room:
        payload = payload[:room]
        headers[DEAD_TRUNCATED_HEADER] = "true"  # shorter than "false": the room still holds
    check_size(js, payload, headers)
    await _stored(js, dead_subject, payload, headers, 5.0)
    metrics.labelled(metrics.DEAD_LETTERS, reason).inc()
