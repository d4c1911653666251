"""The `continuity` command: run services, try records, operate runs, measure."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from continuity import registry

Command = Callable[[argparse.Namespace], int]


def _serve(args: argparse.Namespace) -> int:
    from shared.config import Config, ConfigError
    from shared.runtime import run

    try:
        config = Config.from_env()
        app = registry.load(args.service)  # a service may read settings of its own
    except ConfigError as err:
        print(f"continuity: configuration error: {err}", file=sys.stderr)
        return 2
    run(app, config)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="continuity", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run one service until SIGTERM")
    serve.add_argument("service", choices=sorted(registry.SERVICES))
    serve.set_defaults(func=_serve)

    for register in _command_modules():
        register(sub)
    return parser


def _command_modules() -> list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]]:
    """Each command group lives in its own module and adds its own sub-parsers."""
    from continuity import bench, operator_cli, runners_cli, sessions_cli, simulate, streams_cli, up

    return [
        up.register,
        sessions_cli.register,
        operator_cli.register,
        runners_cli.register,
        bench.register,
        simulate.register,
        streams_cli.register,
    ]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Command = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
