"""The operators' pages on runners and tenants say what the code does: the commands of
docs/operator.md's section "Runners, tenants and owners" parse as written, its settings exist
with the defaults it gives, its refusal reasons are the contract's; the subjects
docs/operations/nats-authorization.md grants each user are in that user's permissions of
deploy/nats/auth.conf. (What the commands and the permissions do is tested in tests/deploy.)"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import typing
from pathlib import Path

import pytest

from continuity.cli.dead import KINDS
from continuity.cli.main import build_parser
from shared.contract.types import RefusalCode
from shared.platform.config import Config

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = (ROOT / "docs" / "operator.md").read_text()
AUTHORIZATION = (ROOT / "docs" / "operations" / "nats-authorization.md").read_text()
AUTH_CONF = (ROOT / "deploy" / "nats" / "auth.conf").read_text()
PLACEHOLDERS = {
    "RUNNER_ID": "r-1",
    "TENANT[,TENANT...]": "acme,globex",
    "TENANT": "acme",
    "CONVERSATION": "c-1",
    "AGENT": "codex",
    "FILE": "r-1.nk",
    "DIR": "deploy/nats",
    "NAME": "alice",
}


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


TENANCY = section(OPERATOR, "Runners, tenants and owners")


def synopsis() -> list[list[str]]:
    """The section's command lines, continuation lines joined, as words with the placeholders
    filled in and the optional brackets opened."""
    block = TENANCY.split("```\n")[1]
    lines: list[str] = []
    for line in block.splitlines():
        if line.startswith(" ") and lines:
            lines[-1] += " " + line.strip()
        elif line.strip():
            lines.append(line.strip())
    commands = []
    for line in lines:
        words = [PLACEHOLDERS.get(w, w) for w in shlex.split(line)]
        commands.append([PLACEHOLDERS.get(w.strip("[]"), w.strip("[]")) for w in words if w.strip("[]")])
    return commands


def test_the_runner_and_ownership_commands_parse_as_the_guide_writes_them() -> None:
    commands = synopsis()
    assert {" ".join(c[1:3]) for c in commands} == {
        "runners add",
        "runners tenants",
        "runners list",
        "runners remove",
        "sessions transfer",
        "sessions ownership",
    }
    parser = build_parser()
    for words in commands:
        assert words[0] == "continuity"
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            try:
                parser.parse_args(words[1:])
            except SystemExit:
                pytest.fail(f"{' '.join(words)}: {stderr.getvalue()}")


SETTING = re.compile(r"^\| `(CONTINUITY_[A-Z0-9_]+)` \[`?([^`\]]+)`?\] \|", re.MULTILINE)


def test_the_settings_exist_with_the_defaults_the_guide_gives() -> None:
    settings = SETTING.findall(TENANCY)
    assert len(settings) >= 12
    defaults = Config()
    for variable, default in settings:
        field = variable.removeprefix("CONTINUITY_").lower()
        value = getattr(defaults, field)
        assert (float(default) == value) if isinstance(value, int | float) else (default == value), variable
        # The variable sets that field: a value other than the default is read into it.
        other = {"enforced": "open", "refuse": "allow"}.get(default, "7")
        assert str(getattr(Config.from_env({variable: other}), field)).rstrip("0").rstrip(".") == other
    # The in-flight share names its whole, whose default it gives too.
    assert "`CONTINUITY_CONSUMER_IN_FLIGHT` [256]" in TENANCY and defaults.consumer_in_flight == 256


def test_the_refusal_reasons_are_the_contracts() -> None:
    assert "refused" in KINDS
    paragraph = next(p for p in TENANCY.split("\n\n") if "dead list --kind refused" in p)
    named = set(re.findall(r"`([a-z_]+)`", paragraph))
    assert set(typing.get_args(RefusalCode)) <= named


def permissions(user_block: str) -> set[str]:
    start = AUTH_CONF.index(f"{user_block} = {{")
    block = AUTH_CONF[start : AUTH_CONF.index("\n}\n", start)]
    return set(re.findall(r'"([^"\s]+)(?: q)?"', block))


def expand(subject: str) -> list[str]:
    """`a.{b,c}` as `a.b` and `a.c`."""
    found = re.search(r"\{([^}]+)\}", subject)
    if not found:
        return [subject]
    return [s for part in found.group(1).split(",") for s in expand(subject.replace(found.group(0), part, 1))]


@pytest.mark.parametrize(
    ("user", "block"),
    [
        ("session-store", "SESSION_STORE_PERMISSIONS"),
        ("operator", "OPERATOR_PERMISSIONS"),
        ("console", "CONSOLE_PERMISSIONS"),
    ],
)
def test_the_subjects_the_page_grants_are_in_the_users_permissions(user: str, block: str) -> None:
    row = next(line for line in AUTHORIZATION.splitlines() if line.startswith(f"| `{user}` |"))
    named = [
        s
        for span in re.findall(r"`([^`]+)`", row)
        for s in expand(span)
        if re.match(r"^(continuity\.(sessions|runners)\.|\$KV\.|\$JS\.API\.STREAM\.(CREATE|MSG)\.KV_)", s)
    ]
    assert named, user
    allowed = permissions(block)
    assert [s for s in named if s not in allowed] == []


def user_block(block: str) -> str:
    user = AUTH_CONF[AUTH_CONF.index(f"{block} = {{") :]
    return user[: user.index("\n}\n")]


def test_the_session_store_makes_runners_decisions_consumers_but_not_the_runs_index() -> None:
    """The operator asks the session-store (`continuity.runners.consumer`), which may create a
    consumer only under the filtered create subject, and delete any of CONTINUITY_DECISIONS'
    but the runs index's."""
    user = user_block("SESSION_STORE_PERMISSIONS")
    assert '"$JS.API.CONSUMER.CREATE.CONTINUITY_DECISIONS.*.continuity.decisions.*"' in user
    assert '"$JS.API.CONSUMER.DELETE.CONTINUITY_DECISIONS.*"' in user
    deny = user[user.index("deny: [") : user.index("]", user.index("deny: ["))]
    assert '"$JS.API.CONSUMER.CREATE.CONTINUITY_DECISIONS.continuity:runs-index.>"' in deny
    assert '"$JS.API.CONSUMER.DELETE.CONTINUITY_DECISIONS.continuity:runs-index"' in deny
    assert '"continuity.runners.consumer q"' in user


def test_the_operator_has_no_consumer_api_but_info() -> None:
    """It reads the dead letters and the decisions by sequence; runners' consumers are the
    session-store's to make and delete."""
    user = user_block("OPERATOR_PERMISSIONS")
    consumer_rights = set(re.findall(r'"(\$JS\.API\.CONSUMER\.[^"]+)"', user))
    assert consumer_rights == {
        "$JS.API.CONSUMER.LIST.*",
        "$JS.API.CONSUMER.NAMES.*",
        "$JS.API.CONSUMER.INFO.*.*",
    }
    assert "$JS.FC." not in user and "$JS.ACK." not in user and "deny" not in user


def test_the_console_has_no_consumer_api() -> None:
    """A consumer create request may name any deliver subject (the server does not check it
    against the creator's permissions): the console reads the streams by sequence instead."""
    user = user_block("CONSOLE_PERMISSIONS")
    assert "$JS.API.CONSUMER." not in user and "$JS.FC." not in user and "$JS.ACK." not in user
