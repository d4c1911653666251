"""`continuity streams check|apply`: compare the stored JetStream streams and the services'
durable consumers with the configuration, and change them only when an operator says so.

The services never update an existing stream or consumer (shared/platform/bus/streams.py); this command
is the one place that does.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import nats.errors
from nats.js.errors import Error as JetStreamError

from continuity.cli.arguments import connection_parent
from continuity.cli.connect import connect, nats_url, redacted_url
from continuity.cli.examples import examples
from continuity.cli.exits import EXIT_BAD_INPUT, EXIT_CONFLICT, EXIT_OK, EXIT_UNAVAILABLE, Failure
from continuity.cli.output import report, to_json
from continuity.cli.tables import table
from services import registry
from shared.platform.bus import streams
from shared.platform.config import Config, ConfigError


def _replicas(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 5:
        raise argparse.ArgumentTypeError("must be between 1 and 5")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "streams",
        help="compare the JetStream streams and consumers with the configuration, or update them",
        description="The services create missing streams and consumers and never change existing "
        "ones. `check` shows how the stored ones differ from the configuration "
        "(CONTINUITY_STREAM_REPLICAS, CONTINUITY_DUPLICATE_WINDOW_S, CONTINUITY_ACK_WAIT_S) and exits "
        "1 when they do; `apply` updates them to it.",
    )
    actions = p.add_subparsers(dest="action", required=True)
    examples(p, "continuity streams check", "continuity streams apply --replicas 3 --yes")
    common = connection_parent()
    common.add_argument(
        "--replicas",
        type=_replicas,
        default=None,
        help="replicas to compare with (default: $CONTINUITY_STREAM_REPLICAS, else 1)",
    )
    check = actions.add_parser(
        "check", parents=[common], help="print the differences; exit 1 when there are any"
    )
    check.set_defaults(func=_check)
    examples(check, "continuity streams check", "continuity streams check --replicas 3 --json")
    apply = actions.add_parser(
        "apply", parents=[common], help="create missing streams and update differing ones"
    )
    apply.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    apply.set_defaults(func=_apply)
    examples(apply, "continuity streams apply --replicas 3 --yes")


def _wanted(args: argparse.Namespace) -> tuple[list[Any], list[streams.DurableConsumer]]:
    config = Config.from_env()
    replicas = args.replicas or config.stream_replicas
    wanted = dataclasses.replace(config, stream_replicas=replicas)
    return (
        [
            *streams.stream_configs(replicas, config.duplicate_window_s, streams.StreamLimits.of(config)),
            *registry.own_streams(wanted),
        ],
        # The consumers the services' specs declare: the ones they create at start.
        registry.durable_consumers(replicas, config.ack_wait_s),
    )


async def _session(args: argparse.Namespace, action: Callable[[Any], Any]) -> Any:
    url = nats_url(args)
    try:
        nc = await connect(url, args.timeout)
    except Exception:
        raise Failure(
            EXIT_UNAVAILABLE, "unavailable", f"cannot connect to NATS at {redacted_url(url)}"
        ) from None
    try:
        return await asyncio.wait_for(action(nc.jetstream(timeout=args.timeout)), args.timeout * 10)
    except (TimeoutError, nats.errors.TimeoutError):
        raise Failure(EXIT_UNAVAILABLE, "timeout", "JetStream did not answer in time") from None
    except nats.errors.NoRespondersError:
        raise Failure(EXIT_UNAVAILABLE, "unavailable", "JetStream is not enabled on this server") from None
    finally:
        try:
            await asyncio.wait_for(nc.close(), 2)
        except Exception:  # closing is best effort
            pass


def _render(missing: list[str], drifts: list[streams.Drift]) -> str:
    if not missing and not drifts:
        return "streams and consumers match the configuration"
    rows = [[name, "(missing)", "-", "-"] for name in missing]
    rows += [[d.name, d.field, d.stored, d.configured] for d in drifts]
    return table(["STREAM/CONSUMER", "SETTING", "STORED", "CONFIGURED"], rows)


def _as_json(missing: list[str], drifts: list[streams.Drift], **more: Any) -> dict[str, Any]:
    return {"missing": missing, "drift": [msgspec.to_builtins(d) for d in drifts], **more}


def _check(args: argparse.Namespace) -> int:
    try:
        configs, consumers = _wanted(args)
        missing, drifts = asyncio.run(_session(args, lambda js: streams.check(js, configs, consumers)))
    except ConfigError as err:
        return report(args, Failure(EXIT_BAD_INPUT, "invalid_configuration", str(err)))
    except JetStreamError as err:
        return report(args, Failure(EXIT_UNAVAILABLE, "unavailable", f"JetStream: {type(err).__name__}"))
    except Failure as failure:
        return report(args, failure)
    print(to_json(_as_json(missing, drifts)) if args.json else _render(missing, drifts))
    return EXIT_CONFLICT if missing or drifts else EXIT_OK


def _confirm(count: int) -> bool:
    # On stderr, so that stdout stays one JSON object with --json.
    print(
        f"apply the configuration to {count} stream(s) or consumer(s)? [y/N] ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def _apply(args: argparse.Namespace) -> int:
    try:
        configs, consumers = _wanted(args)
        missing, drifts = asyncio.run(_session(args, lambda js: streams.check(js, configs, consumers)))
        if not missing and not drifts:
            print(to_json(_as_json([], [], changed=[])) if args.json else _render([], []))
            return EXIT_OK
        if not args.json:
            print(_render(missing, drifts))
        names = {d.name for d in drifts} | set(missing)
        if not args.yes and not _confirm(len(names)):
            raise Failure(EXIT_CONFLICT, "not_confirmed", "nothing was changed (confirm, or pass --yes)")
        changed = asyncio.run(_session(args, lambda js: streams.apply(js, configs, consumers)))
    except ConfigError as err:
        return report(args, Failure(EXIT_BAD_INPUT, "invalid_configuration", str(err)))
    except JetStreamError as err:
        # The server's own words (for example: a stream's retention cannot change); no secret.
        why = getattr(err, "description", None) or type(err).__name__
        return report(args, Failure(EXIT_CONFLICT, "refused", f"JetStream refused the update: {why}"))
    except Failure as failure:
        return report(args, failure)
    print(to_json(_as_json(missing, drifts, changed=changed)) if args.json else "\n".join(changed))
    return EXIT_OK
