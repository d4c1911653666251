"""`continuity completion bash|zsh`: a shell completion script made from the argument parser."""

from __future__ import annotations

import argparse

from continuity.cli.examples import examples


def _completion(args: argparse.Namespace) -> int:
    import shtab

    from continuity.cli.main import build_parser  # the whole command, which includes this one

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Prints the completion script of the continuity command for bash or zsh.",
    )
    completion.add_argument("shell", choices=["bash", "zsh"])
    completion.set_defaults(func=_completion)
    examples(
        completion,
        'eval "$(continuity completion bash)"            # this shell',
        "continuity completion zsh > ~/.zfunc/_continuity  # zsh, with ~/.zfunc on fpath",
    )
