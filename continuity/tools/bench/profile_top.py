"""The top entries of a profile that `continuity bench pipeline --profile FILE` recorded (py-spy's
raw format: one line per distinct stack, `frame;frame;... count`): each function's share of the
samples where it runs itself and where it is anywhere on the stack.

`python -m continuity.tools.bench.profile_top FILE [--top N] [--under FUNCTION]`; `--under`
keeps only the stacks that pass through a function (the handler, say), shares still of all.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


def function_of(frame: str) -> str:
    """`name (path:line)` without its line: samples of one function on several lines add up."""
    return _LINE.sub(")", frame.strip())


def stacks(lines: Iterable[str]) -> Iterable[tuple[list[str], int]]:
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            yield [function_of(f) for f in stack.split(";")], int(count)


def top(lines: Iterable[str], n: int = 25, under: str | None = None) -> str:
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for frames, count in stacks(lines):
        total += count
        if under is not None and not any(under in f for f in frames):
            continue
        own[frames[-1]] += count
        for f in set(frames):
            anywhere[f] += count
    if total == 0:
        return "no samples"
    out = [f"{total} samples; own = the function itself, total = with what it calls"]
    out.append(f"{'own %':>7}  function")
    out += [f"{100 * c / total:>7.1f}  {f}" for f, c in own.most_common(n)]
    out.append(f"{'total %':>7}  function")
    out += [f"{100 * c / total:>7.1f}  {f}" for f, c in anywhere.most_common(n)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="profile_top", description=__doc__)
    p.add_argument("file", type=Path)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--under", help="only stacks through a function whose name contains this")
    args = p.parse_args(argv)
    with args.file.open() as f:
        print(top(f, args.top, args.under))
    return 0


if __name__ == "__main__":
    sys.exit(main())
