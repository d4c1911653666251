"""Helpers of the tests, one home per concept (none of them is collected as a test):

- services: configuration, services run in-process (`running`) or as processes (`ServiceProcess`)
- waiting: `wait_for`, the one deadline-bounded wait
- servers: a NATS server a test configures and reloads itself
- streams: reading streams as a runner or an operator does (`read_stream`, `Bus`)
- decisions: `Decisions`, the one reader of the decisions a runner receives
- sessions: session references, session-store requests, saved records seeded in Redis
- runner: the one fake runner (its archive endpoint) and the events a runner publishes
- archiver, reconciliation: work items and seeded runs of those services' tests
- cluster: load published through node failures of the clustered servers
- metrics: the metrics the registry can expose

The common names are re-exported here; import the rest from their module.
"""

from tests.support.decisions import Decisions
from tests.support.runner import (
    KEYS,
    KEYS_ENV,
    Answer,
    FakeRunner,
    answer_with,
    command_result,
    never_answer,
    new_runner_id,
    resume_failed,
    tool_call,
)
from tests.support.servers import ConfiguredNatsServer
from tests.support.services import RunningApp, ServiceProcess, http_status, make_config, read_until, running
from tests.support.sessions import CWD, commit_req, decide_req, new_session, save_session, seed_session
from tests.support.streams import Bus, header, read_stream
from tests.support.waiting import wait_for

__all__ = [
    "CWD",
    "KEYS",
    "KEYS_ENV",
    "Answer",
    "Bus",
    "ConfiguredNatsServer",
    "Decisions",
    "FakeRunner",
    "RunningApp",
    "ServiceProcess",
    "answer_with",
    "command_result",
    "commit_req",
    "decide_req",
    "header",
    "http_status",
    "make_config",
    "never_answer",
    "new_runner_id",
    "new_session",
    "read_stream",
    "read_until",
    "resume_failed",
    "running",
    "save_session",
    "seed_session",
    "tool_call",
    "wait_for",
]
