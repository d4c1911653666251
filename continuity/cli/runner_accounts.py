"""A runner's NATS account and its NKEY: the two templates below are the only place the layout
of a runner's account is written (docs/operations/nats-authorization.md explains it).

The account imports exactly the subjects that carry its runner_id; its seed is written to a
file only its owner reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import nkeys

RUNNER_MAX_PAYLOAD = 72 * 1024
"""The largest message a runner's connection may publish: an event or a request of the contract
(MAX_EVENT_BYTES, MAX_REQUEST_BYTES: 64 KiB) with room for its headers. Larger ones close the
runner's connection at the server, so that its share of CONTINUITY_EVENTS is bounded in bytes
as well as in messages (`max_msgs_per_subject`, shared/platform/bus/streams.py)."""

# One account per runner: what it may publish and subscribe, what it imports from CONTINUITY,
# and its archive subject exported to CONTINUITY (which imports it, IMPORT_TEMPLATE). Its
# permissions and its imports name the same subjects: the permission refuses at once what the
# missing import would leave without a responder. Its events go on the subjects of the
# contract's two event types (sections 4.1 and 4.6), so that the events stream's per-subject
# limit is a limit per runner and event type.
ACCOUNT_TEMPLATE = """\
# runner {runner_id}
RUNNER_{runner_id}: {{
  # at most {max_payload} bytes a message (RUNNER_MAX_PAYLOAD in continuity/cli/runner_accounts.py)
  limits: {{ max_payload: {max_payload} }}
  users: [
    {{
      nkey: {public_key}
      permissions: {{
        publish: {{
          allow: [
            "continuity.events.{runner_id}.resume_failed"
            "continuity.events.{runner_id}.turn_completed"
            "continuity.sessions.{runner_id}.decide"
            "continuity.sessions.{runner_id}.commit"
            "continuity.sessions.{runner_id}.get"
            "continuity.sessions.{runner_id}.reject"
            "continuity.sessions.{runner_id}.claim"
            "$JS.API.CONSUMER.MSG.NEXT.CONTINUITY_DECISIONS.{runner_id}"
            "$JS.ACK.CONTINUITY_DECISIONS.{runner_id}.>"
          ]
        }}
        subscribe: {{
          allow: [ "_INBOX.{runner_id}.>", "continuity.runner.{runner_id}.archive" ]
        }}
        # its one answer to each archive request it receives
        allow_responses: {{ max: 1, expires: "1m" }}
      }}
    }}
  ]
  imports: [
    {{ service: {{ account: CONTINUITY, subject: "continuity.sessions.{runner_id}.decide" }} }}
    {{ service: {{ account: CONTINUITY, subject: "continuity.sessions.{runner_id}.commit" }} }}
    {{ service: {{ account: CONTINUITY, subject: "continuity.sessions.{runner_id}.get" }} }}
    {{ service: {{ account: CONTINUITY, subject: "continuity.sessions.{runner_id}.reject" }} }}
    {{ service: {{ account: CONTINUITY, subject: "continuity.sessions.{runner_id}.claim" }} }}
    {{ service: {{ account: CONTINUITY, subject: "continuity.events.{runner_id}.resume_failed" }} }}
    {{ service: {{ account: CONTINUITY, subject: "continuity.events.{runner_id}.turn_completed" }} }}
    {{ service: {{
      account: CONTINUITY, subject: "$JS.API.CONSUMER.MSG.NEXT.CONTINUITY_DECISIONS.{runner_id}"
    }} }}
    {{ service: {{ account: CONTINUITY, subject: "$JS.ACK.CONTINUITY_DECISIONS.{runner_id}.>" }} }}
  ]
  exports: [
    {{ service: "continuity.runner.{runner_id}.archive", accounts: [CONTINUITY] }}
  ]
}}
"""

IMPORT_TEMPLATE = (
    '  {{ service: {{ account: RUNNER_{runner_id}, subject: "continuity.runner.{runner_id}.archive" }} }}\n'
)


def account_block(runner_id: str, public_key: str) -> str:
    return ACCOUNT_TEMPLATE.format(runner_id=runner_id, public_key=public_key, max_payload=RUNNER_MAX_PAYLOAD)


def import_entry(runner_id: str) -> str:
    return IMPORT_TEMPLATE.format(runner_id=runner_id)


def inbox_prefix(runner_id: str) -> str:
    """The inbox prefix a runner must connect with: it may subscribe nowhere else."""
    return f"_INBOX.{runner_id}"


@dataclass(frozen=True)
class Identity:
    runner_id: str
    seed: bytes
    public_key: str


def new_identity(runner_id: str) -> Identity:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    return Identity(runner_id, bytes(seed), public)


def write_seed(path: Path, seed: bytes) -> None:
    """Create the seed file readable by its owner only; never overwrite an existing one."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(seed + b"\n")
