"""`continuity nats init DIR`: the decentralized layout's operator folder (its keys, accounts,
users' creds and the servers' include), from the rules of deploy/nats/auth.conf. Runners are then
issued on running servers with `continuity runners add --operator-dir DIR`."""

from __future__ import annotations

import argparse
from pathlib import Path

from continuity.cli import exits, output
from continuity.cli.examples import examples
from continuity.natsauth import layout, operator_dir


def _init(args: argparse.Namespace) -> int:
    path = Path(args.dir)
    try:
        try:
            auth_conf = Path(args.auth_conf) if args.auth_conf else layout.AUTH_CONF
            if not auth_conf.is_file():
                raise exits.Failure(
                    exits.EXIT_BAD_INPUT,
                    "invalid_argument",
                    f"{auth_conf} is not a file: give the deployment's auth.conf with --auth-conf",
                )
            folder = operator_dir.init(path, args.resolver_dir, auth_conf)
        except FileExistsError:
            raise exits.Failure(
                exits.EXIT_CONFLICT,
                "already_initialised",
                f"{path} is already an operator folder; nothing changed",
            ) from None
    except exits.Failure as failure:
        return output.report(args, failure)
    print(f"# operator folder {path}: every nats-server includes {path / operator_dir.SERVER_CONF}")
    names = ", ".join(sorted(p.stem for p in (path / "creds").glob("*.creds")))
    print(f"# CONTINUITY is {folder.continuity}; creds in {path / 'creds'}: {names}")
    print("# keys/operator.nk signs nothing day to day (keep it offline); keys/signing.nk signs accounts")
    return exits.EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    nats = sub.add_parser("nats", help="the decentralized NATS layout: an operator folder")
    commands = nats.add_subparsers(dest="nats_command", required=True)
    examples(nats, "continuity nats init /secure/continuity-operator --resolver-dir /data/jwt")
    init = commands.add_parser(
        "init", help="create an operator folder: keys, accounts, creds, the servers' include"
    )
    init.add_argument("dir", metavar="DIR", help="the folder to create (refused when it is already one)")
    init.add_argument(
        "--resolver-dir",
        default="./jwt",
        help="where each server's full resolver keeps the accounts it learns (relative to its "
        "working folder)",
    )
    init.add_argument(
        "--auth-conf",
        default=None,
        help="the config-file layout's rules to build the accounts from (default: deploy/nats/auth.conf of "
        "a checkout; an installed package names the deployment's copy)",
    )
    init.set_defaults(func=_init)
    examples(init, "continuity nats init /secure/continuity-operator --resolver-dir /data/jwt")
