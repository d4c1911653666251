"""The operations pages (docs/operations/*.md) cite only commands that exist as written: every
`continuity ...` line of their shell blocks parses with the command's own argument parser,
every `continuity ...` span of their prose names an existing command and existing options, and
every `redis-cli` line speaks TLS with a client certificate, as the production Redis requires.
The runbooks read dead letters with `continuity dead` and runs with `continuity runs`, never by
a request subject, so they cannot drift from the command."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex

import pytest

from continuity.cli.main import build_parser
from shared.contract import subjects
from tests.deploy.conftest import REPO

PAGES = sorted((REPO / "docs" / "operations").glob("*.md"))
RUNBOOKS = REPO / "docs" / "operations" / "runbooks.md"
REDIS_TLS_OPTIONS = ("--tls", "--cacert", "--cert", "--key")
OPERATOR_SUBJECTS = (
    subjects.RUNS_GET,
    subjects.RUNS_AUDIT,
    subjects.RUNS_LIST,
    subjects.OPERATOR_RETRY,
    subjects.RECONCILIATIONS_LIST,
    subjects.RECONCILIATIONS_GET,
    subjects.RECONCILIATIONS_RESOLVE,
)
"""Request subjects that the `continuity` command asks on an operator's behalf."""


def shell_lines(text: str) -> list[str]:
    """Each command line of a page's `sh` blocks (indented blocks of lists too), continuation
    lines joined."""
    lines = []
    for block in re.findall(r"^[ \t]*```sh\n(.*?)^[ \t]*```", text, re.MULTILINE | re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                lines.append(line.strip())
    return lines


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line (split at `|`, `&&`, `||`, `;`), comments dropped,
    leading `NAME=value` assignments removed. `$(...)` stays inside its word."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set("|&;"):
            commands.append([])
        else:
            commands[-1].append(token)
    result = []
    for words in commands:
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        if words:
            result.append(words)
    return result


def continuity_commands(text: str) -> list[list[str]]:
    found = []
    for line in shell_lines(text):
        for words in simple_commands(line):
            if words[0] == "continuity":
                found.append(words)
    return found


def parse_error(args: list[str]) -> str | None:
    """What the real parser says about `continuity ARGS`, or None when it accepts them."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(args)
    except SystemExit as exit_:
        return stderr.getvalue().strip().splitlines()[-1] if exit_.code else None
    return None


def _sub(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def span_error(words: list[str]) -> str | None:
    """A prose mention: the command path must exist and each option it names must be one of
    that command's (placeholders such as RUN_ID and `...` are left alone)."""
    parser = build_parser()
    for word in words[1:]:
        below = _sub(parser)
        if not below or word.startswith("-"):
            break
        if word not in below:
            return f"no command {word!r} under {parser.prog!r}"
        parser = below[word]
    options = {flag for action in parser._actions for flag in action.option_strings}
    for word in words[1:]:
        if word.startswith("--") and word.split("=", 1)[0] not in options:
            return f"{parser.prog} has no option {word}"
    return None


# The words as the shell passes them (quotes resolved), shown quoted again in the test's id.
CASES = [(page.name, shlex.join(words)) for page in PAGES for words in continuity_commands(page.read_text())]


def test_the_pages_cite_commands() -> None:
    cited = {name for name, _ in CASES}
    assert {"runbooks.md", "deploy.md", "tls.md"} <= cited
    lines = [line for name, line in CASES if name == "runbooks.md"]
    for command in ("continuity dead list", "continuity dead show", "continuity runs show"):
        assert any(line.startswith(command) for line in lines), command


@pytest.mark.parametrize(("page", "line"), CASES)
def test_every_command_line_parses(page: str, line: str) -> None:
    error = parse_error(shlex.split(line)[1:])
    assert error is None, f"{page}: `{line}`: {error}"


SPANS = [
    (page.name, span)
    for page in PAGES
    for span in re.findall(r"`(continuity [^`]+)`", page.read_text().replace("\n", " "))
]


@pytest.mark.parametrize(("page", "span"), SPANS)
def test_every_command_the_prose_names_exists(page: str, span: str) -> None:
    words = [w for w in span.split() if w not in ("...",)]
    error = span_error(words)
    assert error is None, f"{page}: `{span}`: {error}"


@pytest.mark.parametrize(
    "line",
    [
        "continuity runs get run-7f3a",  # the subject's verb, not the command's
        "continuity dead list --subject continuity.dead.quarantine",  # natscli's option
        "continuity reconciliations resolve run-7f3a --outcome completed|not_performed|mixed --actor a",
        "continuity reconciliations resolve run-7f3a --outcome completed --evidence x",  # no --actor
    ],
)
def test_a_line_that_does_not_parse_is_found(line: str) -> None:
    """The check itself, on lines the runbooks once held or could hold."""
    words = shlex.split(line)
    assert parse_error(words[1:]) is not None or span_error(words) is not None


def test_a_prose_mention_of_a_missing_command_or_option_is_found() -> None:
    assert span_error(["continuity", "runs", "get"]) == "no command 'get' under 'continuity runs'"
    assert span_error(["continuity", "dead", "list", "--subject"]) is not None
    assert span_error(["continuity", "dead", "replay", "SEQ"]) is None


def redis_cli_problems(page: str, text: str) -> tuple[int, list[str]]:
    """How many `redis-cli` invocations the page's shell lines hold, and those without TLS and
    a client certificate."""
    found, problems = 0, []
    for line in shell_lines(text):
        for words in simple_commands(line):
            for word in words:
                # redis-cli inside `sh -c '...'`: the quoted command is one word; split it again.
                inner = shlex.split(word) if "redis-cli" in word and " " in word else [word]
                if "redis-cli" not in inner:
                    continue
                found += 1
                missing = [o for o in REDIS_TLS_OPTIONS if o not in inner]
                if missing:
                    problems.append(f"{page}: `{line}` lacks {missing}")
    # In prose, `redis-cli --tls ...` abbreviates the shell lines; a mention with options but
    # without --tls is a line nobody could run against production.
    for span in re.findall(r"`(redis-cli [^`]+)`", text.replace("\n", " ")):
        found += 1
        if "--tls" not in span.split():
            problems.append(f"{page}: `{span}` lacks --tls")
    return found, problems


def test_every_redis_cli_line_uses_tls_with_a_client_certificate() -> None:
    total = 0
    for page in PAGES:
        found, problems = redis_cli_problems(page.name, page.read_text())
        assert not problems, "\n".join(problems)
        total += found
    assert total, "the runbooks show how to reach Redis"


def test_a_redis_cli_line_without_tls_is_found() -> None:
    """The line the runbooks held before."""
    line = (
        "kubectl -n redis exec redis-node-0 -- redis-cli -p 26379 sentinel get-master-addr-by-name mymaster"
    )
    text = f"```sh\n{line}\n```\n"
    found, problems = redis_cli_problems("planted", text)
    assert found == 1 and len(problems) == 1
    span = "redis-cli -p 26379 sentinel get-master-addr-by-name mymaster"
    assert redis_cli_problems("planted", f"Sentinel (`{span}`)") == (1, [f"planted: `{span}` lacks --tls"])


def drift(text: str) -> list[str]:
    """Dead letters read with natscli, or a request subject named where its command belongs."""
    problems = ["`nats stream view`: use `continuity dead list|show`"] if "nats stream view" in text else []
    problems += [
        f"`{s}`: name the `continuity` command that asks it" for s in OPERATOR_SUBJECTS if f"`{s}`" in text
    ]
    return problems


def test_the_runbooks_use_the_command_not_its_subjects_or_natscli_for_dead_letters() -> None:
    problems = drift(RUNBOOKS.read_text())
    assert not problems, "\n".join(problems)


def test_a_planted_subject_or_view_is_found() -> None:
    """The sentences the runbooks held before."""
    text = "Read them with `nats stream view CONTINUITY_DEAD`. The `detail` through `continuity.runs.get`."
    assert len(drift(text)) == 2
