"""`continuity harness classify|list`: the runner SDK's harness table from the command line.

`classify` reads one outcome of a harness's resume as JSON on stdin (`{"exit_code", "stdout",
"stderr", "error"}`) and prints the class the table's rules give it (`failure_class` null: not a
failure) and the rule that decided, exactly as a runner's `adapter.assess` does. `list` prints the
harnesses of the table shipped with the SDK."""

from __future__ import annotations

import argparse
import sys

from continuity.cli.examples import examples
from continuity.cli.exits import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, Failure
from continuity.cli.output import report, to_json
from continuity.cli.tables import table

STDIN_LIMIT = 6 * 4 * 1024 * 1024 + 64 * 1024
"""Bytes of JSON read from stdin at most: an outcome holds at most 4 MiB of text, which JSON's
escapes can make up to six times longer."""


def _names() -> list[str] | None:
    """The table's harness names, for `--harness` and shell completion; None when the shipped
    table cannot be read (`classify` then says why), so that no other command fails with it."""
    from continuity_runner import harness

    try:
        return harness.names()
    except harness.InvalidTable:
        return None


def _classify(args: argparse.Namespace) -> int:
    from continuity_runner import harness
    from continuity_runner.errors import InvalidRequest

    data = sys.stdin.buffer.read(STDIN_LIMIT + 1)
    try:
        if len(data) > STDIN_LIMIT:
            raise InvalidRequest(f"stdin holds more than {STDIN_LIMIT} bytes", code="payload_too_large")
        if not data.strip():
            raise InvalidRequest("stdin is empty: give the outcome as JSON", code="malformed_json")
        outcome = harness.decode_outcome(data)
        assessment = harness.adapter(args.harness).assess(outcome)
    except InvalidRequest as err:
        return report(args, Failure(EXIT_BAD_INPUT, err.code, f"the outcome: {err.message}"))
    except harness.UnknownHarness as err:
        return report(args, Failure(EXIT_BAD_INPUT, "unknown_harness", str(err)))
    except harness.InvalidTable as err:
        return report(args, Failure(EXIT_INTERNAL, "invalid_table", f"the shipped harness table: {err}"))
    print(to_json(assessment))
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from continuity_runner import harness

    shipped = harness.shipped_table()
    if args.json:
        print(
            to_json(
                {
                    "version": shipped.version,
                    "harnesses": [
                        {
                            "name": h.name,
                            "title": h.title,
                            "kind": h.kind,
                            "package": h.package,
                            "tested_versions": h.tested_versions,
                            "rules": len(h.rules),
                            "sessions": h.sessions is not None,
                        }
                        for h in shipped.harnesses
                    ],
                }
            )
        )
        return EXIT_OK
    rows = [
        [
            h.name,
            h.title,
            h.kind,
            ", ".join(h.tested_versions) or "-",
            str(len(h.rules)),
            "files" if h.sessions is not None else "unknown",
        ]
        for h in shipped.harnesses
    ]
    print(f"Harness table {shipped.version}")
    print(table(["NAME", "TITLE", "KIND", "TESTED", "RULES", "PROBE"], rows, whole=(2,)))
    return EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "harness",
        help="the runner SDK's harness table: classify a resume's outcome, list the harnesses",
        description=__doc__,
    )
    verbs = group.add_subparsers(dest="harness_command", required=True, metavar="COMMAND")
    examples(
        group,
        "continuity harness list",
        "continuity harness classify --harness gemini-cli < outcome.json",
    )

    p = verbs.add_parser(
        "classify",
        help="the failure class of one outcome (JSON on stdin), as a runner's adapter gives it",
        description="Reads {exit_code, stdout, stderr, error} as JSON on stdin; prints "
        '{"failure_class": ..., "rule": ...} (failure_class null: not a failure). Exit code 0; '
        "2 for an outcome that is not one (the wrong types, more than 4 MiB) or a harness the "
        "table does not have.",
    )
    p.add_argument(
        "--harness", required=True, choices=_names(), metavar="NAME", help="the harness (see list)"
    )
    p.set_defaults(func=_classify)
    examples(
        p,
        """echo '{"exit_code": 1, "stdout": "", "stderr": "No conversation found with session ID: x"}' \\""",
        "    | continuity harness classify --harness claude-code",
        "continuity harness classify --harness gemini-cli < outcome.json",
    )

    p = verbs.add_parser("list", help="the harnesses of the shipped table: names, titles, tested versions")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    p.set_defaults(func=_list)
    examples(p, "continuity harness list", "continuity harness list --json | jq -r '.harnesses[].name'")
