"""The `continuity` command: run services, try records, operate runs, measure."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from importlib import metadata
from typing import cast

from continuity.cli.arguments import Parser
from continuity.cli.examples import examples
from services import registry

Command = Callable[[argparse.Namespace], int]

COMMANDS = (
    "continuity.cli.completion",
    "continuity.devstack.up",
    "continuity.cli.sessions",
    "continuity.cli.reconciliations",
    "continuity.cli.runs",
    "continuity.cli.runners",
    "continuity.cli.nats_layout",
    "continuity.cli.policy",
    "continuity.cli.harness",
    "continuity.tools.bench",
    "continuity.tools.simulate",
    "continuity.cli.streams",
    "continuity.cli.watch",
    "continuity.cli.dead",
    "continuity.cli.history",
    "continuity.tools.memory",
)
"""The modules that add commands, in the order `--help` lists them: each one's `register(sub)`
adds its sub-parsers, each with its examples. Modules are imported when the parser is built."""


def _serve(args: argparse.Namespace) -> int:
    from shared.platform import tracing
    from shared.platform.config import Config, ConfigError
    from shared.platform.runtime import run
    from shared.policy import PolicyRefused
    from shared.policy.configured import configured_policy

    try:
        config = Config.from_env()
        service = registry.load(args.service)  # a service may read settings of its own
        configured_policy(config)  # a policy that breaks an invariant stops the start here
        tracing.check(os.environ)  # OTEL_* asking for what this process cannot export
    except (ConfigError, tracing.TracingConfigError) as err:
        print(f"continuity: configuration error: {err}", file=sys.stderr)
        return 2
    except PolicyRefused as err:
        print(f"continuity: policy refused: CONTINUITY_POLICY_FILE: {err}", file=sys.stderr)
        return 2
    run(service, config)
    return 0


def version() -> str:
    try:
        return metadata.version("continuity")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="continuity", description=__doc__)
    parser.add_argument("--version", action="version", version=f"continuity {version()}")
    # Sub-commands are made with the class of their parent: Parser, all the way down.
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True),
    )

    serve = sub.add_parser("serve", help="run one service until SIGTERM")
    serve.add_argument("service", choices=sorted(registry.SERVICES))
    serve.set_defaults(func=_serve)
    examples(serve, "continuity serve session-store", "NATS_URL=nats://nats:4222 continuity serve classifier")

    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    examples(
        parser,
        "continuity up",
        "continuity simulate",
        "continuity reconciliations list",
        "continuity runs list --status operator --older-than 10m",
        "continuity serve classifier",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    Parser.wants_json = "--json" in argv
    args = build_parser().parse_args(argv)
    report_unknown_variables(args)
    func: Command = args.func
    return func(args)


def report_unknown_variables(args: argparse.Namespace) -> None:
    """Names each CONTINUITY_* variable nothing reads (a mistyped one would silently change
    nothing), without stopping: a service in its JSON log, any other command on stderr."""
    from shared.platform.config import unknown_variable_message

    unknown = registry.unknown_variables()
    if not unknown:
        return
    if args.command == "serve":
        from shared.platform import logs

        logs.setup(args.service)  # again with the configured level once the service runs
        log = logs.Log("continuity.config")
        for name, closest in unknown:
            log.warning("unknown_variable", variable=name, closest=closest)
        return
    for name, closest in unknown:
        print(f"continuity: warning: {unknown_variable_message(name, closest)}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
