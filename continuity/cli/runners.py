"""`continuity runners add|tenants|list|remove`: issue runners, record their tenants, revoke them.

A runner gets an NKEY (its seed is written to a file only it reads), an account of its own
that imports exactly the subjects that carry its runner_id, a record in the runner directory
(the tenants it acts for, contract section 10.2) and a durable pull consumer on its decisions
that the session-store creates and deletes when asked (`continuity.runners.consumer`), so that
neither the runner nor the operator's NATS user holds a consumer-create right. Removing a
runner revokes it in the directory at once; its account leaves NATS when the servers restart.

This module is the command: its arguments and what it prints. The account and the NKEY are
made in `runner_accounts`, the conf files edited in `runner_files`, the consumer asked for in
`runner_consumers`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from continuity.cli import arguments, connect, exits, output, runner_live, tables
from continuity.cli.examples import examples
from continuity.cli.runner_accounts import (
    Identity,
    account_block,
    import_entry,
    inbox_prefix,
    new_identity,
    write_seed,
)
from continuity.cli.runner_consumers import decisions_consumers, request_consumer
from continuity.cli.runner_files import (
    ACCOUNTS_FILE,
    IMPORTS_FILE,
    add_to_conf_dir,
    check_conf_dir,
    planned_removal,
    replace,
    runners_in_conf,
)
from shared.contract import errors, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.tenancy import (
    MAX_TENANTS,
    QuotaUsage,
    RunnerPutRequest,
    RunnerRecord,
    RunnerRevokeRequest,
)

RESTART = (
    "restart the NATS servers one at a time (a configuration reload does not wire a runner's "
    "imports; docs/operations/nats-authorization.md)"
)


def _tenant_list(value: str) -> list[str]:
    """`--tenant acme,globex`: each a contract token."""
    check = arguments.token("--tenant")
    parts = [part.strip() for part in value.split(",")]
    if any(not part for part in parts):
        raise argparse.ArgumentTypeError("--tenant takes TENANT[,TENANT...] without empty names")
    return [check(part) for part in parts]


def _tenants(args: argparse.Namespace) -> list[str]:
    """The tenants of every --tenant, in order, each once."""
    tenants = list(dict.fromkeys(args.tenant or []))
    if len(tenants) > MAX_TENANTS:
        raise exits.Failure(
            exits.EXIT_BAD_INPUT, "invalid_argument", f"at most {MAX_TENANTS} tenants per runner"
        )
    return tenants


def _put(
    client: ContinuityClient, runner_id: str, tenants: Sequence[str], actor: str
) -> Awaitable[RunnerRecord]:
    return client.runner_put(RunnerPutRequest(runner_id=runner_id, tenants=list(tenants), actor=actor))


def _record_text(r: RunnerRecord) -> str:
    return output.fields(r)


# add ---------------------------------------------------------------------------------------


def _create(args: argparse.Namespace) -> None:
    """The runner's decisions consumer, made by the session-store."""
    runner_id: str = args.runner_id
    try:
        asyncio.run(
            connect.session(
                args, lambda c: request_consumer(c, runner_id, "create", arguments.actor_of(args))
            )
        )
    except exits.Failure as failure:
        why = failure.message
        if failure.code == errors.RUNNER_NOT_ISSUED.code:
            why = (
                f"runner {runner_id} is not issued (not in the runner directory, or revoked): record its "
                f"tenants first with `continuity runners tenants {runner_id} --tenant TENANT`"
            )
        raise exits.Failure(
            failure.exit_code,
            "consumer_not_created",
            f"the decisions consumer was not created: {why}; then run "
            f"`continuity runners add {runner_id} --consumer-only`",
        ) from None


def _record_tenants(
    args: argparse.Namespace, tenants: list[str]
) -> tuple[RunnerRecord | None, exits.Failure | None]:
    """The directory's record of the new runner, or the failure that kept it from being written."""
    try:
        record = asyncio.run(
            connect.session(args, lambda c: _put(c, args.runner_id, tenants, arguments.actor_of(args)))
        )
    except exits.Failure as failure:
        later = f"continuity runners tenants {args.runner_id} --tenant {','.join(tenants)}"
        consumer = f"continuity runners add {args.runner_id} --consumer-only"
        also = f" and `{consumer}`" if args.create_consumer else ""
        return None, exits.Failure(
            failure.exit_code,
            "tenants_not_recorded",
            f"runner {args.runner_id} was issued (its {_secret(args)}), but its tenants were "
            f"not recorded in the runner directory: {failure.message}. The services refuse its requests "
            f"and events (runner_not_registered) until they are: once the session-store answers, run "
            f"`{later}`{also} with the operator's credentials in NATS_URL",
        )
    return record, None


def _secret(args: argparse.Namespace) -> str:
    return f"creds are in {args.creds_file}" if args.operator_dir else f"seed is in {args.seed_file}"


def _add_live(args: argparse.Namespace) -> int | None:
    """Issued on the running servers: the account pushed, then the tenants recorded. An exit
    code when the command ends here (the tenants not recorded), else None."""
    tenants = _tenants(args)
    account = runner_live.issue(args)
    record, failure = _record_tenants(args, tenants)
    if args.json:
        out: dict[str, Any] = {
            "runner_id": account.runner_id,
            "account": account.account,
            "creds_file": str(args.creds_file),
            "inbox_prefix": inbox_prefix(account.runner_id),
            "directory": record,
        }
        if failure is not None:
            out["error"] = {"code": failure.code, "message": failure.message}
        print(output.to_json(out))
    else:
        print(
            f"# issued runner {account.runner_id}: account {account.account}, stored by "
            f"{args.servers} server(s); no restart needed"
        )
        if record is not None:
            print(f"# runner directory: {record.runner_id} issued for {', '.join(record.tenants)}")
        print(f"# the runner connects with its creds file and inbox prefix {inbox_prefix(account.runner_id)}")
    if failure is not None:
        print(f"continuity: error: {failure.message} [{failure.code}]", file=sys.stderr)
        return int(failure.exit_code)
    return None


def _add(args: argparse.Namespace) -> int:
    runner_id: str = args.runner_id
    try:
        if not args.consumer_only and args.operator_dir:
            code = _add_live(args)
            if code is not None:
                return code
        elif not args.consumer_only:
            tenants = _tenants(args)
            if args.conf_dir:
                check_conf_dir(Path(args.conf_dir), runner_id)
            identity = new_identity(runner_id)
            try:
                write_seed(Path(args.seed_file), identity.seed)
            except FileExistsError:
                raise exits.Failure(
                    exits.EXIT_CONFLICT, "seed_exists", f"{args.seed_file} exists; it is never overwritten"
                ) from None
            if args.conf_dir:
                add_to_conf_dir(Path(args.conf_dir), identity)
            record, failure = _record_tenants(args, tenants)
            _print_identity(args, identity, record, failure)
            if failure is not None:
                print(f"continuity: error: {failure.message} [{failure.code}]", file=sys.stderr)
                return int(failure.exit_code)
        if args.create_consumer or args.consumer_only:
            _create(args)
            print(
                f"# the session-store created consumer {runner_id} on {subjects.DECISIONS_STREAM}",
                file=sys.stderr,
            )
    except exits.Failure as failure:
        return output.report(args, failure)
    return exits.EXIT_OK


def _print_identity(
    args: argparse.Namespace,
    identity: Identity,
    record: RunnerRecord | None,
    failure: exits.Failure | None,
) -> None:
    if args.json:
        out: dict[str, Any] = {
            "runner_id": identity.runner_id,
            "public_key": identity.public_key,
            "seed_file": str(args.seed_file),
            "inbox_prefix": inbox_prefix(identity.runner_id),
            "account": account_block(identity.runner_id, identity.public_key),
            "import": import_entry(identity.runner_id).strip(),
            "directory": record,
        }
        if failure is not None:
            out["error"] = {"code": failure.code, "message": failure.message}
        print(output.to_json(out))
        return
    if args.conf_dir:
        print(f"# added runner {identity.runner_id} ({identity.public_key}) to {args.conf_dir}")
        print(f"# then {RESTART}")
    else:
        print(f"# 1. in {ACCOUNTS_FILE} (inside `accounts`): the runner's account")
        print(account_block(identity.runner_id, identity.public_key))
        print(f"# 2. in {IMPORTS_FILE} (CONTINUITY's imports): its archive subject")
        print(import_entry(identity.runner_id))
        print(f"# 3. {RESTART}")
    if record is not None:
        print(f"# runner directory: {record.runner_id} issued for {', '.join(record.tenants)}")
    print(f"# the runner connects with its seed file and inbox prefix {inbox_prefix(identity.runner_id)}")


def _checked_add(args: argparse.Namespace) -> int:
    if args.operator_dir and args.conf_dir:
        return output.report(
            args,
            exits.Failure(
                exits.EXIT_BAD_INPUT,
                "invalid_argument",
                "--operator-dir and --conf-dir are two layouts: give one",
            ),
        )
    if not args.consumer_only:
        secret = ("--creds-file", args.creds_file) if args.operator_dir else ("--seed-file", args.seed_file)
        missing = [o for o, v in (secret, ("--tenant", args.tenant)) if not v]
        if missing:
            failure = exits.Failure(
                exits.EXIT_BAD_INPUT,
                "invalid_argument",
                f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required "
                "(or --consumer-only)",
            )
            return output.report(args, failure)
    return _add(args)


# tenants -----------------------------------------------------------------------------------


def _set_tenants(args: argparse.Namespace) -> int:
    try:
        tenants = _tenants(args)
    except exits.Failure as failure:
        return output.report(args, failure)
    return connect.execute(
        args, lambda c: _put(c, args.runner_id, tenants, arguments.actor_of(args)), _record_text
    )


# list --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Listed:
    runner_id: str
    tenants: list[str]
    status: str
    """active, revoked, or unrecorded (in the conf files, not in the directory)."""
    in_conf: bool | None
    """Its account is in runners.conf (None: no --conf-dir was given)."""
    consumer: bool
    added_at: str | None
    actor: str | None
    revoked_at: str | None
    connections: int | None = None
    """Its client connections open on the servers (None: unknown, the session-store has no
    monitor user configured)."""
    usage: list[QuotaUsage] = field(default_factory=list)
    """The runner's usage of its quotas, then each of its tenants'."""


async def _listing(c: ContinuityClient, timeout: float, in_conf: set[str] | None) -> list[Listed]:
    reply = await c.runners()
    consumers = await decisions_consumers(c.nc, timeout)
    records = {r.runner_id: r for r in reply.items}
    ids = sorted(set(records) | (in_conf or set()))
    listed = []
    for rid in ids:
        r = records.get(rid)
        listed.append(
            Listed(
                runner_id=rid,
                tenants=list(r.tenants) if r else [],
                status=r.status if r else "unrecorded",
                in_conf=None if in_conf is None else rid in in_conf,
                consumer=rid in consumers,
                added_at=r.added_at if r else None,
                actor=r.actor if r else None,
                revoked_at=r.revoked_at if r else None,
                connections=r.connections if r else None,
                usage=list(r.usage) if r else [],
            )
        )
    return listed


def _events(u: QuotaUsage | None) -> str:
    """Events of the burst spent lately, of the burst, at the rate: `12/200 @100/s`."""
    return "-" if u is None else f"{u.events_spent:.0f}/{u.event_burst} @{u.event_rate:g}/s"


def _runs(u: QuotaUsage | None) -> str:
    return "-" if u is None else f"{u.stored_runs}/{u.stored_runs_limit}"


def _render_list(listed: list[Listed]) -> str:
    if not listed:
        return "No runners: issue one with `continuity runners add RUNNER_ID --tenant TENANT ...`."

    def yes(value: bool | None) -> str:
        return "-" if value is None else ("yes" if value else "no")

    def own(r: Listed) -> QuotaUsage | None:
        return next((u for u in r.usage if u.scope == "runner"), None)

    rows = [
        [r.runner_id, ",".join(r.tenants) or "-", r.status, yes(r.in_conf), yes(r.consumer)] for r in listed
    ]
    directory = tables.table(["RUNNER", "TENANTS", "STATUS", "IN CONF", "CONSUMER"], rows, whole=(2,))
    # What the servers and the quotas say, apart: the directory's table keeps its columns.
    live = [
        [
            r.runner_id,
            "-" if r.connections is None else str(r.connections),
            _events(own(r)),
            _runs(own(r)),
        ]
        for r in listed
    ]
    watched = tables.table(["RUNNER", "CONNECTIONS", "EVENTS", "RUNS"], live, whole=(1, 2, 3))
    return (
        f"{directory}\n\n{watched}\n"
        "CONNECTIONS: open on the servers now (- unknown: the session-store has no monitor user); "
        "EVENTS: of the burst, spent lately / burst @ rate; RUNS: stored / limit (the runner's "
        "own quotas; --json adds its tenants')"
    )


def _list(args: argparse.Namespace) -> int:
    in_conf = runners_in_conf(Path(args.conf_dir)) if args.conf_dir else None
    return connect.execute(
        args,
        lambda c: _listing(c, args.timeout, in_conf),
        _render_list,
        lambda listed: {"items": listed},
    )


# remove ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Removed:
    runner_id: str
    directory: RunnerRecord | None
    """The revoked record (None: the directory did not know the runner)."""
    consumer: str
    """deleted, absent, or failed."""
    conf: str | None
    """removed or absent (None: no --conf-dir was given)."""
    restart_required: bool
    account: str | None = None
    """With --operator-dir: revoked (its connections closed, its creds refused) or absent."""


async def _revoke_and_delete(
    c: ContinuityClient, runner_id: str, actor: str
) -> tuple[RunnerRecord | None, str]:
    record: RunnerRecord | None
    try:
        record = await c.runner_revoke(RunnerRevokeRequest(runner_id=runner_id, actor=actor))
    except RequestError as err:
        if err.code != errors.NOT_FOUND.code:
            raise
        record = None
    # Revoked first: from here on the services refuse the runner, whatever happens next.
    consumer: str
    try:
        consumer = (await request_consumer(c, runner_id, "delete", actor)).consumer
    except Exception:  # reported with the rest; running the command again finishes the removal
        consumer = "failed"
    return record, consumer


def _confirm(runner_id: str, conf_dir: str | None, live: bool) -> bool:
    # On stderr, so that stdout stays one JSON object with --json.
    conf = f", and remove its account from {conf_dir}" if conf_dir else ""
    conf += ", and revoke its account on the servers" if live else ""
    print(
        f"Remove runner {runner_id}: revoke it in the runner directory (its session requests and "
        f"events are refused from now on), delete its decisions consumer{conf}? [y/N] ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _remove(args: argparse.Namespace) -> int:
    runner_id: str = args.runner_id
    try:
        changes = planned_removal(Path(args.conf_dir), runner_id) if args.conf_dir else {}
        if not args.yes and not _confirm(runner_id, args.conf_dir, bool(args.operator_dir)):
            raise exits.Failure(
                exits.EXIT_CONFLICT, "not_confirmed", "nothing was changed (confirm, or pass --yes)"
            )
        record, consumer = asyncio.run(
            connect.session(args, lambda c: _revoke_and_delete(c, runner_id, arguments.actor_of(args)))
        )
        for path, text in changes.items():
            replace(path, text)
        account = None
        if args.operator_dir:
            account = "revoked" if runner_live.revoke(args) is not None else "absent"
        conf = None if not args.conf_dir else ("removed" if changes else "absent")
        if record is None and consumer == "absent" and conf != "removed" and account != "revoked":
            where = f", nor in {args.conf_dir}" if args.conf_dir else ""
            raise exits.Failure(
                exits.EXIT_NOT_FOUND,
                "not_found",
                f"runner {runner_id} is not known: not in the runner directory, no decisions consumer{where}",
            )
        live = account is not None
        removed = Removed(
            runner_id, record, consumer, conf, restart_required=not live and conf != "absent", account=account
        )
    except exits.Failure as failure:
        return output.report(args, failure)
    print(_removed_json(removed) if args.json else _render_removed(removed, args.conf_dir))
    if consumer == "failed":
        print(
            f"continuity: error: the runner is revoked, but its decisions consumer was not deleted; "
            f"run `continuity runners remove {runner_id}` again [consumer_not_deleted]",
            file=sys.stderr,
        )
        return exits.EXIT_UNAVAILABLE
    return exits.EXIT_OK


def _removed_json(r: Removed) -> str:
    """`account` only with --operator-dir: the config-file layout's answer is as it was."""
    out = msgspec.to_builtins(r)
    if r.account is None:
        del out["account"]
    return output.to_json(out)


def _render_removed(r: Removed, conf_dir: str | None) -> str:
    lines = [
        f"Runner {r.runner_id} revoked in the runner directory: its session requests and events are "
        "refused from now on."
        if r.directory is not None
        else f"Runner {r.runner_id} was not in the runner directory (nothing to revoke there).",
        {
            "deleted": f"Its decisions consumer {r.runner_id} was deleted.",
            "absent": f"It had no decisions consumer on {subjects.DECISIONS_STREAM}.",
            "failed": "Its decisions consumer could not be deleted.",
        }[r.consumer],
    ]
    if r.account == "revoked":
        lines.append(
            "Its account was revoked on the servers: its connections are closed and its creds refused."
        )
    elif r.account == "absent":
        lines.append("It had no active account on the servers.")
    elif r.conf == "removed":
        lines.append(f"Its account and archive import were removed from {conf_dir}.")
    elif r.conf == "absent":
        lines.append(f"It had no account in {conf_dir}.")
    else:
        lines.append(
            f"Remove its blocks from {ACCOUNTS_FILE} (`RUNNER_{r.runner_id}`) and {IMPORTS_FILE}, "
            "or run the command again with --conf-dir."
        )
    if r.restart_required:
        lines.append(
            f"Next: {RESTART}; until then its NKEY still connects, and the services refuse what it sends."
        )
    return "\n".join(lines)


# The command --------------------------------------------------------------------------------


def _tenant_option(parser: argparse.ArgumentParser, required: bool, what: str) -> None:
    parser.add_argument(
        "--tenant",
        action="extend",
        type=_tenant_list,
        required=required,
        metavar="TENANT[,TENANT...]",
        help=what,
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    runners = sub.add_parser("runners", help="issue, list and remove runners")
    commands = runners.add_subparsers(dest="runners_command", required=True)
    examples(
        runners,
        "continuity runners add r-01 --tenant acme --seed-file r-01.nk --conf-dir deploy/nats",
        "continuity runners list --json",
    )
    common = arguments.connection_parent()
    _register_add(commands, common)
    _register_tenants(commands, common)
    _register_list(commands, common)
    _register_remove(commands, common)


def _register_add(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    add = commands.add_parser(
        "add",
        parents=[common],
        help="issue a runner: its NKEY seed, its account (printed or added), its tenants, its consumer",
    )
    add.add_argument("runner_id", type=arguments.runner_id, metavar="RUNNER_ID")
    add.add_argument("--seed-file", help="where to write the runner's seed (mode 0600, never overwritten)")
    add.add_argument(
        "--creds-file",
        help="with --operator-dir: where to write the runner's creds (mode 0600, never overwritten)",
    )
    _tenant_option(
        add,
        False,
        "the tenants it acts for, recorded in the runner directory (required unless --consumer-only)",
    )
    add.add_argument(
        "--conf-dir",
        default=None,
        help=f"add the runner to {ACCOUNTS_FILE} and {IMPORTS_FILE} in this folder instead of printing",
    )
    add.add_argument(
        "--create-consumer",
        action="store_true",
        help="also have the session-store create the runner's decisions consumer (NATS_URL / --nats-url "
        "with operator credentials)",
    )
    add.add_argument(
        "--consumer-only", action="store_true", help="only create the consumer of an existing runner"
    )
    runner_live.add_options(add, "issue the runner's account")
    arguments.actor_option(add)
    add.set_defaults(func=_checked_add)
    examples(
        add,
        "continuity runners add r-01 --tenant acme --seed-file r-01.nk",
        "continuity runners add r-01 --tenant acme,globex --seed-file r-01.nk --conf-dir deploy/nats "
        "--create-consumer",
        "continuity runners add r-01 --consumer-only     # once the streams exist",
    )


def _register_tenants(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    tenants = commands.add_parser(
        "tenants",
        parents=[common],
        help="record the tenants a runner acts for (replacing its earlier ones; a revoked runner is "
        "active again)",
    )
    tenants.add_argument("runner_id", type=arguments.runner_id, metavar="RUNNER_ID")
    _tenant_option(tenants, True, "the tenants it acts for")
    arguments.actor_option(tenants)
    tenants.set_defaults(func=_set_tenants)
    examples(tenants, "continuity runners tenants r-01 --tenant acme,globex --actor alice")


def _register_list(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    listing = commands.add_parser(
        "list",
        parents=[common],
        help="the runner directory, with the conf files, the consumers, the live connections and "
        "the usage of each runner's quotas",
    )
    listing.add_argument(
        "--conf-dir", default=None, help=f"also tell which runners have an account in {ACCOUNTS_FILE} here"
    )
    listing.set_defaults(func=_list)
    examples(listing, "continuity runners list --conf-dir deploy/nats", "continuity runners list --json")


def _register_remove(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    remove = commands.add_parser(
        "remove",
        parents=[common],
        help="revoke a runner, delete its decisions consumer, remove its account from the conf files",
    )
    remove.add_argument("runner_id", type=arguments.runner_id, metavar="RUNNER_ID")
    remove.add_argument(
        "--conf-dir", default=None, help=f"remove the runner from {ACCOUNTS_FILE} and {IMPORTS_FILE} here"
    )
    remove.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    runner_live.add_options(remove, "revoke the runner's account")
    arguments.actor_option(remove)
    remove.set_defaults(func=_remove)
    examples(
        remove,
        "continuity runners remove r-01 --conf-dir deploy/nats --actor alice",
        "continuity runners remove r-01 --conf-dir deploy/nats --yes --json",
    )
