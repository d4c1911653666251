"""The archiver service: a durable pull consumer on `continuity.work.archive`.

Entries its decisions leave in the outbox after a crash are published by the redelivered work
item itself, and by the outbox sweeper every recording service runs.
"""

from __future__ import annotations

from nats.aio.msg import Msg

from shared.contract import subjects
from shared.platform.runtime import Context
from shared.platform.service import ConsumerSpec, ServiceSpec, Wiring
from shared.records.outbox import Outbox

from .handler import ArchiveHandler
from .link import ArchiveLink

NAME = "archiver"
VERSION = "1.0.0"

# The raw delivery: the handler keeps a long archive alive with progress acks.
ARCHIVE_WORK = ConsumerSpec(subjects.WORK_STREAM, subjects.ARCHIVER_CONSUMER, subjects.WORK_ARCHIVE, Msg)

SPEC = ServiceSpec(
    name=NAME,
    version=VERSION,
    description="The remote-then-local archive before a replacement",
    consumers=(ARCHIVE_WORK,),
)


def build(ctx: Context) -> Wiring:
    outbox = Outbox(ctx.redis, ctx.js)
    link = ArchiveLink(ctx.nc, ctx.config)
    return Wiring(
        handlers={ARCHIVE_WORK: ArchiveHandler(link.client, ctx.redis, outbox, ctx.config)},
        parts=(link, outbox.sweeper()),
    )
