"""Loss and delay on one link, in user space: packets an iptables NFQUEUE rule hands to this
process are dropped with a probability and otherwise let through after a delay.

`tc netem` does this in the kernel; the kernel of the measurements was built without it
(CONFIG_NET_SCH_NETEM unset), so the partition suite queues the link's packets here instead.
Run inside the host's namespace: `python -m tests.support.netns_delay QUEUE LOSS DELAY_MS`.
Only the nfnetlink_queue messages this needs are spoken (bind, metadata copy, verdicts).
"""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import struct
import sys

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQNL_CFG_CMD_BIND, NFQNL_COPY_META = 1, 1
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4


def _attr(kind: int, data: bytes) -> bytes:
    length = 4 + len(data)
    return struct.pack("=HH", length, kind) + data + b"\0" * (-length % 4)


def _message(kind: int, queue: int, attrs: bytes, flags: int = NLM_F_REQUEST) -> bytes:
    body = struct.pack("!BBH", socket.AF_UNSPEC, 0, queue) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, 0, 0) + body


def _packet_ids(data: bytes) -> list[int]:
    ids = []
    offset = 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 16:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            at = offset + 20  # past nlmsghdr and nfgenmsg
            while at + 4 <= offset + length:
                alen, akind = struct.unpack_from("=HH", data, at)
                if alen < 4:
                    break
                if akind & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, at + 4)[0])
                at += alen + (-alen % 4)
        offset += length + (-length % 4)
    return ids


def main(queue: int, loss: float, delay_s: float) -> None:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((0, 0))
    sock.send(
        _message(NFQNL_MSG_CONFIG, queue, _attr(NFQA_CFG_CMD, struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, 0)))
    )
    params = _attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
    sock.send(
        _message(NFQNL_MSG_CONFIG, queue, params + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", 65536)))
    )
    sock.setblocking(False)
    loop = asyncio.new_event_loop()
    rng = random.Random()

    def verdict(packet_id: int, accept: bool) -> None:
        attrs = _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT if accept else NF_DROP, packet_id))
        try:
            sock.send(_message(NFQNL_MSG_VERDICT, queue, attrs))
        except OSError:
            pass  # the queue is gone: the namespace is being torn down

    def readable() -> None:
        while True:
            try:
                data = sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError:  # ENOBUFS under a burst: the kernel dropped some, as a lossy link would
                continue
            for packet_id in _packet_ids(data):
                if rng.random() < loss:
                    verdict(packet_id, False)
                else:
                    loop.call_later(delay_s, verdict, packet_id, True)

    loop.add_reader(sock.fileno(), readable)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    print("ready", flush=True)
    loop.run_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]) / 1000)
