"""The `continuity` command: run services, try records, operate runs, measure."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib import metadata
from typing import cast

from continuity.cli.common import Parser
from services import registry

Command = Callable[[argparse.Namespace], int]


def _serve(args: argparse.Namespace) -> int:
    from shared.platform.config import Config, ConfigError
    from shared.platform.runtime import run

    try:
        config = Config.from_env()
        app = registry.load(args.service)  # a service may read settings of its own
    except ConfigError as err:
        print(f"continuity: configuration error: {err}", file=sys.stderr)
        return 2
    run(app, config)
    return 0


def _completion(args: argparse.Namespace) -> int:
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0


def version() -> str:
    try:
        return metadata.version("continuity")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    from continuity.cli.help_examples import add_examples

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

    completion = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Prints the completion script of the continuity command for bash or zsh.",
    )
    completion.add_argument("shell", choices=["bash", "zsh"])
    completion.set_defaults(func=_completion)

    for register in _command_modules():
        register(sub)
    add_examples(parser)
    return parser


def _command_modules() -> list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]]:
    """Each command group lives in its own module and adds its own sub-parsers."""
    from continuity.cli import dead as dead_cli
    from continuity.cli import operator as operator_cli
    from continuity.cli import runners as runners_cli
    from continuity.cli import sessions as sessions_cli
    from continuity.cli import streams as streams_cli
    from continuity.cli import watch as watch_cli
    from continuity.devstack import up
    from continuity.tools import bench, simulate
    from continuity.tools import memory as memory_cli

    return [
        up.register,
        sessions_cli.register,
        operator_cli.register,
        runners_cli.register,
        bench.register,
        simulate.register,
        streams_cli.register,
        watch_cli.register,
        dead_cli.register,
        memory_cli.register,
    ]


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
