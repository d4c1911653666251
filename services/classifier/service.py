"""The classifier service: a durable pull consumer on runner events, and the outbox sweeper."""

from __future__ import annotations

from nats.aio.msg import Msg

from shared.contract import subjects
from shared.platform.parts import Closer
from shared.platform.redis import Redis
from shared.platform.runtime import Context
from shared.platform.service import ConsumerSpec, ServiceSpec, Wiring
from shared.policy.configured import configured_policy
from shared.records.outbox import Outbox

from .handler import EventHandler

NAME = "classifier"
VERSION = "1.0.0"


def _runner_of(msg: Msg) -> str:
    """The runner token of `continuity.events.<runner_id>.<type>` (the server's word)."""
    return subjects.runner_of_event_subject(msg.subject) or ""


# The raw delivery: the handler checks the subject before the body, and counts every
# rejection in its own metrics.
EVENTS = ConsumerSpec(
    subjects.EVENTS_STREAM,
    subjects.CLASSIFIER_CONSUMER,
    subjects.EVENTS_ALL,
    Msg,
    # Runners in turn, each with a bounded share: one runner's storm cannot delay
    # another's decisions (docs/contract-v1.md, 10.6).
    fair_by=_runner_of,
)

SPEC = ServiceSpec(
    name=NAME,
    version=VERSION,
    description="Failure classes and recovery decisions",
    consumers=(EVENTS,),
)


def build(ctx: Context) -> Wiring:
    # Events are handled many at a time: their Redis commands share a pipelined client of their
    # own, so the readiness checks never queue before them.
    redis = Redis.from_config(ctx.config)
    outbox = Outbox(redis, ctx.js)
    events = EventHandler(redis, outbox, ctx.config, js=ctx.js, policy=configured_policy(ctx.config))
    return Wiring(
        handlers={EVENTS: events},
        parts=(outbox.sweeper(), Closer(redis.aclose)),
    )
