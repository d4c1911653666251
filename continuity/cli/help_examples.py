"""Examples shown at the end of each command's `--help`, by command path: the one place they
are written, so that a command added anywhere gets its examples here (a test checks that every
command has some)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

EXAMPLES: dict[str, list[str]] = {
    "serve": ["continuity serve session-store", "NATS_URL=nats://nats:4222 continuity serve classifier"],
    "up": [
        "continuity up                      # embedded NATS and Redis on free ports",
        "continuity up --demo               # and a simulated fleet, with a report",
        "NATS_URL=nats://127.0.0.1:4222 REDIS_URL=redis://127.0.0.1:6379/0 continuity up",
    ],
    "completion": [
        'eval "$(continuity completion bash)"            # this shell',
        "continuity completion zsh > ~/.zfunc/_continuity  # zsh, with ~/.zfunc on fpath",
    ],
    "sessions get": ["continuity sessions get --tenant acme --conversation c-1 --agent codex"],
    "sessions decide": [
        "continuity sessions decide --tenant acme --conversation c-1 --agent codex "
        "--adapter codex --model gpt-5 --cwd /work",
    ],
    "sessions commit": [
        "continuity sessions commit --tenant acme --conversation c-1 --agent codex "
        "--native-session-id s-1 --adapter codex --model gpt-5 --cwd /work",
    ],
    "sessions transfer": [
        "continuity sessions transfer acme c-1 codex --to r-02 --actor alice",
    ],
    "sessions ownership": [
        "continuity sessions ownership acme c-1 codex",
        "continuity sessions ownership acme c-1 codex --json",
    ],
    "reconciliations list": [
        "continuity reconciliations list",
        "continuity reconciliations list --status all --limit 20 --json",
    ],
    "reconciliations show": ["continuity reconciliations show run-7f3a"],
    "reconciliations resolve": [
        'continuity reconciliations resolve run-7f3a --outcome completed --evidence "ticket 42 exists" '
        "--actor alice",
        "continuity reconciliations resolve run-7f3a --outcome mixed --evidence-file notes.txt --actor alice",
    ],
    "runs show": ["continuity runs show run-7f3a", "continuity runs show run-7f3a --json"],
    "runs list": [
        "continuity runs list --status operator",
        "continuity runs list --runner r-01 --tenant acme --older-than 10m --limit 50 --json",
    ],
    "runs retry": [
        "continuity runs retry run-7f3a --actor alice",
        "continuity runs retry --status operator --reason native_session_retry_exhausted "
        "--dry-run --actor alice",
        "continuity runs retry --status operator --runner r-01 --max 20 --yes --actor alice",
    ],
    "watch": ["continuity watch", "continuity watch --since 5m --status operator --json"],
    "dead list": ["continuity dead list", "continuity dead list --kind quarantine --since 1h --json"],
    "dead show": ["continuity dead show 42"],
    "dead replay": ["continuity dead replay 42       # once the cause is fixed"],
    "runners add": [
        "continuity runners add r-01 --tenant acme --seed-file r-01.nk",
        "continuity runners add r-01 --tenant acme,globex --seed-file r-01.nk --conf-dir deploy/nats "
        "--create-consumer",
        "continuity runners add r-01 --consumer-only     # once the streams exist",
    ],
    "runners tenants": [
        "continuity runners tenants r-01 --tenant acme,globex --actor alice",
    ],
    "runners list": ["continuity runners list --conf-dir deploy/nats", "continuity runners list --json"],
    "runners remove": [
        "continuity runners remove r-01 --conf-dir deploy/nats --actor alice",
        "continuity runners remove r-01 --conf-dir deploy/nats --yes --json",
    ],
    "bench sessions": ["continuity bench sessions", "continuity bench sessions --json"],
    "bench pipeline": ["continuity bench pipeline", "continuity bench pipeline --json"],
    "bench fairness": ["continuity bench fairness", "continuity bench fairness --unfair --json"],
    "simulate": [
        "continuity simulate                                 # against `continuity up`",
        "continuity simulate --scenario pending,refusal --no-operator --events 10",
        "continuity simulate --seconds 60 --rate 20 --json",
    ],
    "streams check": ["continuity streams check", "continuity streams check --replicas 3 --json"],
    "streams apply": ["continuity streams apply --replicas 3 --yes"],
    "memory estimate": [
        "continuity memory estimate --runs-per-day 10000 --retention-days 30",
        "continuity memory estimate --runs-per-day 10000 --retention-days 7 --sessions 20000 --json",
    ],
}


def commands(
    parser: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command that runs something (the leaves of the sub-command tree), by path."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups and path:
        yield path, parser
    for group in groups:
        for name, child in group.choices.items():
            yield from commands(child, f"{path} {name}".strip())


def add_examples(parser: argparse.ArgumentParser) -> None:
    for path, command in commands(parser):
        examples = EXAMPLES.get(path)
        if examples:
            text = "examples:\n" + "\n".join(f"  {e}" for e in examples)
            command.epilog = f"{command.epilog}\n\n{text}" if command.epilog else text
            command.formatter_class = argparse.RawDescriptionHelpFormatter
