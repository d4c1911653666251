"""Runners' decisions consumers, made and removed by the session-store for operators
(`continuity.runners.consumer`, contract section 10.2).

A consumer create request may name any deliver subject, which the NATS server does not check
against the permissions of the user who sends it: whoever may create a consumer on
CONTINUITY_DECISIONS may have decisions published on any subject of the account. So neither the
runners nor the operator's user hold that right: the operator asks this service, which owns the
runner directory, and the service creates the one consumer a runner binds, with a configuration
of its own (a durable pull consumer named after the runner, filtered to the runner's decisions
subject), never one taken from the request. Its NATS user may create consumers only under that
filtered form and delete runners' consumers, never the runs index's
(deploy/nats/auth.conf)."""

from __future__ import annotations

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from shared.contract import subjects
from shared.contract.errors import RUNNER_NOT_ISSUED, UNAVAILABLE
from shared.contract.tenancy import RunnerConsumerReply, RunnerConsumerRequest, RunnerConsumerState
from shared.platform.logs import Log
from shared.records.runners import RunnerDirectory

log = Log("session-store")


def consumer_config(runner_id: str) -> ConsumerConfig:
    """The runner's durable pull consumer: named after it, its decisions only, every one of
    them kept until it acknowledges it."""
    return ConsumerConfig(
        name=runner_id,
        durable_name=runner_id,
        filter_subject=subjects.decisions(runner_id),
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        max_deliver=-1,
    )


class RunnerConsumers:
    def __init__(self, js: JetStreamContext, directory: RunnerDirectory) -> None:
        self._js = js
        self._directory = directory

    async def request(self, req: RunnerConsumerRequest) -> RunnerConsumerReply:
        state: RunnerConsumerState
        if req.action == "create":
            await self._create(req.runner_id)
            state = "created"
        else:
            state = "deleted" if await self._delete(req.runner_id) else "absent"
        log.info("runner_consumer", runner=req.runner_id, action=req.action, outcome=state, actor=req.actor)
        return RunnerConsumerReply(runner_id=req.runner_id, consumer=state)

    async def _create(self, runner_id: str) -> None:
        """Only for a runner the directory has issued: a consumer is made for a runner that may
        use it, not for any name."""
        record = await self._directory.read(runner_id)
        if record is None or record.status != "active":
            raise RUNNER_NOT_ISSUED.error(
                "the runner is not issued (not in the runner directory, or revoked)"
            )
        try:
            await self._js.add_consumer(subjects.DECISIONS_STREAM, consumer_config(runner_id))
        except NotFoundError:
            raise UNAVAILABLE.error(f"there is no {subjects.DECISIONS_STREAM} stream yet") from None
        except (nats.errors.Error, TimeoutError) as err:
            log.warning(
                "runner_consumer_failed", runner=runner_id, action="create", error_type=type(err).__name__
            )
            raise UNAVAILABLE.error("JetStream did not create the consumer; retry later") from None

    async def _delete(self, runner_id: str) -> bool:
        """False when the runner has no consumer (or there is no stream)."""
        try:
            await self._js.delete_consumer(subjects.DECISIONS_STREAM, runner_id)
        except NotFoundError:
            return False
        except (nats.errors.Error, TimeoutError) as err:
            log.warning(
                "runner_consumer_failed", runner=runner_id, action="delete", error_type=type(err).__name__
            )
            raise UNAVAILABLE.error("JetStream did not delete the consumer; retry later") from None
        return True
