"""`continuity runners add RUNNER_ID`: issue a runner's NATS identity.

A runner gets an NKEY (its seed is written to a file only it reads), an account of its own
that imports exactly its part of the contract, and a durable pull consumer on its decisions
that the services' side creates, so that the runner never holds a consumer-create right. The
account block and the archive import come from the two templates below, the only place the
layout of a runner's account is written (docs/operations/nats-authorization.md explains it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

from continuity import clitools
from shared import subjects

RUNNER_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ACCOUNTS_FILE = "runners.conf"
IMPORTS_FILE = "runner-imports.conf"

# One account per runner: what it may publish and subscribe, what it imports from CONTINUITY,
# and its archive subject exported to CONTINUITY (which imports it, IMPORT_TEMPLATE).
ACCOUNT_TEMPLATE = """\
# runner {runner_id}
RUNNER_{runner_id}: {{
  users: [
    {{
      nkey: {public_key}
      permissions: {{
        publish: {{
          allow: [
            "continuity.events.{runner_id}.*"
            "continuity.sessions.decide"
            "continuity.sessions.commit"
            "continuity.sessions.get"
            "continuity.sessions.reject"
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
    {{ service: {{ account: CONTINUITY, subject: "continuity.sessions.decide" }} }}
    {{ service: {{ account: CONTINUITY, subject: "continuity.sessions.commit" }} }}
    {{ service: {{ account: CONTINUITY, subject: "continuity.sessions.get" }} }}
    {{ service: {{ account: CONTINUITY, subject: "continuity.sessions.reject" }} }}
    {{ service: {{ account: CONTINUITY, subject: "continuity.events.{runner_id}.*" }} }}
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

EMPTY_IMPORTS = "# Maintained by `continuity runners add`: each runner's archive subject.\nimports: [\n]\n"


def account_block(runner_id: str, public_key: str) -> str:
    return ACCOUNT_TEMPLATE.format(runner_id=runner_id, public_key=public_key)


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


def _conf_files(conf_dir: Path) -> tuple[Path, Path]:
    return conf_dir / ACCOUNTS_FILE, conf_dir / IMPORTS_FILE


def check_conf_dir(conf_dir: Path, runner_id: str) -> None:
    """Refuse, before anything is written, a runner already there or a file not as written."""
    accounts, imports = _conf_files(conf_dir)
    if accounts.exists() and re.search(
        rf"^RUNNER_{re.escape(runner_id)}:", accounts.read_text(), re.MULTILINE
    ):
        raise clitools.Failure(
            clitools.EXIT_CONFLICT, "runner_exists", f"{accounts} already has runner {runner_id}"
        )
    if imports.exists() and not imports.read_text().rstrip().endswith("]"):
        raise clitools.Failure(
            clitools.EXIT_BAD_INPUT, "invalid_file", f"{imports} does not end with the imports list's `]`"
        )


def add_to_conf_dir(conf_dir: Path, identity: Identity) -> None:
    """Append the runner's account to runners.conf and its archive import to
    runner-imports.conf (after `check_conf_dir`)."""
    accounts, imports = _conf_files(conf_dir)
    accounts_text = accounts.read_text() if accounts.exists() else ""
    body = (imports.read_text() if imports.exists() else EMPTY_IMPORTS).rstrip()
    imports.write_text(body[:-1].rstrip("\n") + "\n" + import_entry(identity.runner_id) + "]\n")
    separator = "\n" if accounts_text and not accounts_text.endswith("\n\n") else ""
    accounts.write_text(accounts_text + separator + account_block(identity.runner_id, identity.public_key))


async def create_consumer(nc: Any, runner_id: str) -> None:
    """The runner's durable pull consumer, named after it and filtered to its own decisions."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    await nc.jetstream().add_consumer(
        subjects.DECISIONS_STREAM,
        ConsumerConfig(
            name=runner_id,
            durable_name=runner_id,
            filter_subject=subjects.decisions(runner_id),
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            max_deliver=-1,
        ),
    )


def _runner_id(value: str) -> str:
    if not RUNNER_ID.match(value):
        raise argparse.ArgumentTypeError("RUNNER_ID must be 1 to 64 of A-Z a-z 0-9 _ -")
    return value


async def _create(args: argparse.Namespace) -> None:
    url = clitools.nats_url(args)
    try:
        nc = await clitools.connect(url, args.timeout)
    except Exception:
        raise clitools.Failure(
            clitools.EXIT_UNAVAILABLE,
            "unavailable",
            f"cannot connect to NATS at {clitools.redacted_url(url)}",
        ) from None
    try:
        await create_consumer(nc, args.runner_id)
    except Exception as exc:
        raise clitools.Failure(
            clitools.EXIT_UNAVAILABLE,
            "consumer_not_created",
            f"the decisions consumer was not created ({type(exc).__name__}); "
            "check that the NATS user may create it, then run the command again with --consumer-only",
        ) from None
    finally:
        await nc.close()


def _add(args: argparse.Namespace) -> int:
    runner_id: str = args.runner_id
    try:
        if not args.consumer_only:
            if args.conf_dir:
                check_conf_dir(Path(args.conf_dir), runner_id)
            identity = new_identity(runner_id)
            try:
                write_seed(Path(args.seed_file), identity.seed)
            except FileExistsError:
                raise clitools.Failure(
                    clitools.EXIT_CONFLICT, "seed_exists", f"{args.seed_file} exists; it is never overwritten"
                ) from None
            if args.conf_dir:
                add_to_conf_dir(Path(args.conf_dir), identity)
            _print_identity(args, identity)
        if args.create_consumer or args.consumer_only:
            asyncio.run(_create(args))
            print(f"# created consumer {runner_id} on {subjects.DECISIONS_STREAM}", file=sys.stderr)
    except clitools.Failure as failure:
        return clitools.report(args, failure)
    return clitools.EXIT_OK


def _print_identity(args: argparse.Namespace, identity: Identity) -> None:
    if args.json:
        print(
            clitools.to_json(
                {
                    "runner_id": identity.runner_id,
                    "public_key": identity.public_key,
                    "seed_file": str(args.seed_file),
                    "inbox_prefix": inbox_prefix(identity.runner_id),
                    "account": account_block(identity.runner_id, identity.public_key),
                    "import": import_entry(identity.runner_id).strip(),
                }
            )
        )
        return
    if args.conf_dir:
        print(f"# added runner {identity.runner_id} ({identity.public_key}) to {args.conf_dir}")
    else:
        print(f"# 1. in {ACCOUNTS_FILE} (inside `accounts`): the runner's account")
        print(account_block(identity.runner_id, identity.public_key))
        print(f"# 2. in {IMPORTS_FILE} (CONTINUITY's imports): its archive subject")
        print(import_entry(identity.runner_id))
    print(f"# the runner connects with its seed file and inbox prefix {inbox_prefix(identity.runner_id)}")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    runners = sub.add_parser("runners", help="issue runners' NATS identities")
    commands = runners.add_subparsers(dest="runners_command", required=True)
    add = commands.add_parser(
        "add",
        parents=[clitools.connection_parent()],
        help="write a runner's NKEY seed, print (or add) its account, optionally create its consumer",
    )
    add.add_argument("runner_id", type=_runner_id, metavar="RUNNER_ID")
    add.add_argument("--seed-file", help="where to write the runner's seed (mode 0600, never overwritten)")
    add.add_argument(
        "--conf-dir",
        default=None,
        help=f"add the runner to {ACCOUNTS_FILE} and {IMPORTS_FILE} in this folder instead of printing",
    )
    add.add_argument(
        "--create-consumer",
        action="store_true",
        help="also create the runner's decisions consumer (NATS_URL / --nats-url with operator credentials)",
    )
    add.add_argument(
        "--consumer-only", action="store_true", help="only create the consumer of an existing runner"
    )
    add.set_defaults(func=_checked_add)


def _checked_add(args: argparse.Namespace) -> int:
    if not args.consumer_only and not args.seed_file:
        print("continuity: error: --seed-file is required (or --consumer-only)", file=sys.stderr)
        return clitools.EXIT_BAD_INPUT
    return _add(args)
