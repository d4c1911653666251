"""`python -m continuity.tools.harness_docs`: write docs/harnesses/ from the shipped harness table
(sdk/harnesses.json) and its corpus (sdk/harness-corpus.json): an index, and one page per harness
saying what its adapter recognises, what it leaves unclassified, which row of the shipped policy
decides each class, and where the harness keeps its sessions. `--check` writes nothing and exits
1 naming each page that differs (a unit test runs the same comparison).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from shared.policy.policy import SHIPPED
from shared.policy.recovery import Row

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "sdk" / "harnesses.json"
CORPUS = ROOT / "sdk" / "harness-corpus.json"
PINNED = ROOT / "tests" / "harnesses" / "package.json"
DOCS = ROOT / "docs" / "harnesses"

CLASSES = ("native_session_missing", "context_overflow", "transcript_corrupt", "session_busy")
"""The harness failure classes (contract 4.3), in the order the pages list them."""

MEANING = {
    "native_session_missing": "the harness has no such session on this host",
    "context_overflow": "the session is too large to resume",
    "transcript_corrupt": (
        "the saved transcript cannot be loaded (a tool call without its result, a torn line, a bad signature)"
    ),
    "session_busy": "another live process holds the session",
    "unclassified": "a failure the table gives no class",
}

KIND = {"cli": "command-line tool", "sdk": "library", "protocol": "protocol"}

GENERATED = (
    "<!-- Generated from sdk/harnesses.json and sdk/harness-corpus.json by "
    "`python -m continuity.tools.harness_docs`: edit those, then run it. -->"
)

REAL_TESTS = "tests/integration/test_harness_real_clis.py"


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def cell(text: object) -> str:
    """Text inside a Markdown table cell: pipes escaped, one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(value: object, table: bool = True) -> str:
    """`value` as inline code (JSON for anything but a string); in a table cell, pipes escaped."""
    text = value if isinstance(value, str) else json.dumps(value)
    text = cell(text) if table else text.replace("\n", " ")
    if "`" in text:
        return f"`` {text} ``"
    return f"`{text}`"


def condition(when: dict[str, Any]) -> str:
    """A rule's `when` in words: every condition it sets, joined by `and`."""
    parts: list[str] = []
    exit_ = when.get("exit", "any")
    if exit_ == "zero":
        parts.append("exit code 0")
    elif exit_ == "nonzero":
        parts.append("a nonzero exit code")
    elif exit_ == "none":
        parts.append("no exit code")
    elif isinstance(exit_, list):
        parts.append("exit code " + " or ".join(str(c) for c in exit_))
    for item in when.get("json") or []:
        path = code(item["path"])
        if "equals" in item:
            parts.append(f"JSON {path} = {code(item['equals'])}")
        elif "in" in item:
            parts.append(f"JSON {path} one of {code(item['in'])}")
        elif "contains" in item:
            parts.append(f"JSON {path} containing {code(item['contains'])}")
        elif item.get("present"):
            parts.append(f"JSON {path} present")
    if "error" in when:
        parts.append("an error (exception) given" if when["error"] else "no error given")
    if when.get("error_type"):
        parts.append("error type " + " or ".join(code(t) for t in when["error_type"]))
    if when.get("error_code"):
        parts.append("error code " + " or ".join(code(c) for c in when["error_code"]))
    if when.get("text"):
        parts.append("output containing " + " or ".join(code(t) for t in when["text"]))
    if when.get("unless_text"):
        parts.append("output containing none of " + ", ".join(code(t) for t in when["unless_text"]))
    return " and ".join(parts) if parts else "any outcome"


def action(row: Row) -> str:
    return "archive, then `open_replacement`" if row.verdict == "archive" else f"`{row.verdict}`"


def when_row(row: Row) -> str:
    """The conditions of a shipped row beyond its class, in words."""
    parts: list[str] = []
    if row.budget_spent:
        parts.append("the tenant's recovery budget spent")
    if row.min_attempt is not None:
        parts.append(f"attempt {row.min_attempt} or later")
    if row.policy is not None:
        parts.append(f"checkpoint policy `{row.policy}`")
    if row.governed_wait_elapsed:
        parts.append("the governed wait elapsed")
    return f" ({', '.join(parts)})" if parts else ""


def rows_of(failure_class: str) -> str:
    """Which rows of the shipped policy decide `failure_class`, first match first."""
    rows = [row for row in SHIPPED.recovery if failure_class in row.classes]
    described = [f"`{row.id}`{when_row(row)}: {action(row)}, `{row.reason}`" for row in rows]
    return "; else ".join(described)


def run_by_tests(spec: dict[str, Any], pins: dict[str, str]) -> bool:
    """Whether the real-binary tests run this harness: a command-line tool whose package is
    pinned in tests/harnesses at a tested version."""
    package = spec.get("package")
    return spec["kind"] == "cli" and package in pins and pins[package] in (spec.get("tested_versions") or [])


def pinned() -> dict[str, str]:
    """The CLIs the real-binary tests run, by npm package: their pinned versions."""
    deps: dict[str, str] = load(PINNED)["dependencies"]
    return deps


def sessions_section(spec: dict[str, Any]) -> list[str]:
    sessions = spec.get("sessions")
    if sessions is None:
        return [
            "The table gives no files to look for: `adapter.probe` answers `unknown`, and",
            "`runner.recover` reports every failure (the classifier decides by its class).",
        ]
    root = sessions["root"]
    where = code(root["default"], False)
    if root.get("env"):
        where = f"{code('$' + root['env'], False)} when set, else {where}"
    lines = [
        f"- Root: {where} (`~` is the HOME of the environment given to the probe).",
        "- Files under the root: " + ", ".join(code(p, False) for p in sessions["paths"]) + ".",
    ]
    if sessions.get("cwd_key"):
        lines.append(f"- `{{cwd_key}}`: the working directory, named by the `{sessions['cwd_key']}` scheme.")
    if any("{session_id_8}" in p for p in sessions["paths"]):
        lines.append("- `{session_id_8}`: the first 8 characters of the session id.")
    lines.append("- Keyed by: " + ", ".join(code(k, False) for k in sessions.get("keyed_by") or []) + ".")
    lines += ["", sessions.get("notes") or "", ""]
    lines += [
        "`adapter.probe(session_id, cwd=..., env=...)` only asks whether such a regular file exists",
        "(it never opens one): `present`, `absent` (then `runner.recover` rejects the saved handle",
        "and reports nothing), or `unknown` (the root cannot be read or is not known from the",
        "environment given; the failure is reported). A session id that does not match the",
        "harness's pattern is `absent` without touching the disk.",
    ]
    return lines


def page(spec: dict[str, Any], cases: list[dict[str, Any]], pins: dict[str, str]) -> str:
    rules: list[dict[str, Any]] = spec["rules"]
    given = [c for c in CLASSES if any(r["class"] == c for r in rules)]
    out = [GENERATED, "", f"# {spec['title']} (`{spec['name']}`)", ""]
    out += facts_section(spec, pins)
    out += recognised_section(rules)
    out += classes_section(given)
    out += not_recognised_section([c for c in CLASSES if c not in given])
    out += capabilities_section(spec)
    out += ["", "## Sessions", "", *sessions_section(spec), ""]
    out += corpus_section(spec["name"], cases)
    return "\n".join(out)


def facts_section(spec: dict[str, Any], pins: dict[str, str]) -> list[str]:
    """The page's opening list: kind, package, versions, invocation and session ids."""
    out = [f"- Kind: {KIND.get(spec['kind'], spec['kind'])}."]
    if spec.get("package"):
        out.append(f"- Package: {code(spec['package'], False)}.")
    tested = spec.get("tested_versions") or []
    out.append(
        "- Tested versions: " + (", ".join(code(v, False) for v in tested) if tested else "none") + "."
    )
    package = str(spec.get("package"))
    if run_by_tests(spec, pins):
        out.append(
            f"- Run by the tests: {code(package + '@' + pins[package], False)}, pinned in "
            f"`tests/harnesses/package.json`, offline ({REAL_TESTS})."
        )
    out.append(f"- Invocation the rules read: {code(spec['invocation'], False)}.")
    out.append(f"- Session ids: {code(spec['session_id'], False)}.")
    out.append("")
    return out


def recognised_section(rules: list[dict[str, Any]]) -> list[str]:
    out = [
        "## Recognised",
        "",
        "The first rule that holds decides. A rule's class reaches the classifier as the signed",
        'command result\'s `classification` (`runner.recover` signs it); "not a failure" sends nothing.',
        "",
        "| rule | when | class |",
        "|---|---|---|",
    ]
    for rule in rules:
        klass = "not a failure" if rule["class"] is None else f"`{rule['class']}`"
        out.append(f"| `{rule['id']}` | {condition(rule['when'])} | {klass} |")
    out += ["", "Why each rule is there:", ""]
    for rule in rules:
        evidence = "; ".join(rule.get("evidence") or [])
        text = " ".join(
            part for part in (rule.get("note") or "", f"Evidence: {evidence}." if evidence else "") if part
        )
        out.append(f"- `{rule['id']}`: {text}" if text else f"- `{rule['id']}`")
    out.append("")
    return out


def classes_section(given: list[str]) -> list[str]:
    """The shipped policy's rows for each class the rules give, and for `unclassified`."""
    out = [
        "## What Continuity does with each class",
        "",
        "| class | meaning | shipped rows |",
        "|---|---|---|",
    ]
    for klass in [*given, "unclassified"]:
        out.append(f"| `{klass}` | {MEANING[klass]} | {rows_of(klass)} |")
    out.append("")
    return out


def not_recognised_section(missing: list[str]) -> list[str]:
    out = ["## Not recognised", ""]
    if missing:
        out.append(
            "No rule of this harness gives "
            + ", ".join(f"`{c}`" for c in missing)
            + ": such a failure is `unclassified`, like any other failure no rule above names."
        )
    else:
        out.append("Every harness failure class has a rule here; any other failure is `unclassified`.")
    out += [
        "An `unclassified` failure is reported with a command result whose classification is null,",
        "so the classifier decides as for a runner without an adapter. Words in `error.message` are",
        "never read.",
        "",
    ]
    return out


def capabilities_section(spec: dict[str, Any]) -> list[str]:
    out = [
        "## Capabilities by version",
        "",
        "| versions | resume keeps the id | load | fork | background agents | lock |",
        "|---|---|---|---|---|---|",
    ]
    yes = {True: "yes", False: "no"}
    for cap in spec.get("capabilities") or []:
        versions = code(cap["versions"]) if cap["versions"] else "all"
        out.append(
            f"| {versions} | {yes[cap['resume_keeps_id']]} | {code(cap['load'])} | {yes[cap['fork']]} | "
            f"{yes[cap['background_agents']]} | {yes[cap['lock']]} |"
        )
    out.append("")
    for cap in spec.get("capabilities") or []:
        if cap.get("notes"):
            versions = code(cap["versions"], False) if cap["versions"] else "All versions"
            out.append(f"- {versions}: {cap['notes']}")
    return out


def corpus_section(name: str, cases: list[dict[str, Any]]) -> list[str]:
    out = [
        "## Corpus",
        "",
        f"The cases of `sdk/harness-corpus.json` for `{name}`, which both SDKs' tests classify:",
        "",
        "| case | class | rule | source |",
        "|---|---|---|---|",
    ]
    for case in cases:
        expect = case["expect"]
        klass = "not a failure" if expect["failure_class"] is None else f"`{expect['failure_class']}`"
        out.append(f"| `{case['id']}` | {klass} | `{expect['rule']}` | {cell(case['source'])} |")
    out.append("")
    return out


def classify_example(table: dict[str, Any], corpus: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The README's `continuity harness classify` example: a real outcome of the corpus (the first
    case whose source is a real run), its harness, and what the adapter says of it."""
    from continuity_runner import harness

    case = next(c for c in corpus["cases"] if c["source"].startswith("real:"))
    assessed = harness.adapter(case["harness"], harness.load_table(TABLE)).assess(case["outcome"])
    return (
        case["harness"],
        json.dumps(case["outcome"]),
        {"failure_class": assessed.failure_class, "rule": assessed.rule},
    )


def index(table: dict[str, Any], corpus: dict[str, Any], pins: dict[str, str]) -> str:
    name, outcome, said = classify_example(table, corpus)
    out = [
        GENERATED,
        "",
        "# Harness adapters",
        "",
        f"The harness table (`sdk/harnesses.json`, version `{table['version']}`, shipped in both runner",
        "SDKs) says, for each agent harness, how it tells that a resume failed and where it keeps its",
        "sessions. A runner hands what the harness left (exit code, stdout, stderr; for a library, the",
        "exception's type and code) to `runner.recover(adapter, outcome, ...)`: the adapter's rules give",
        "the failure its class, the presence probe looks for the session on the host, and Continuity is",
        "told: the saved handle rejected when the session is absent, else a report with a command result",
        "signed with the class. See [Integrate a runner](../integrate-a-runner.md#harness-adapters) and",
        "the examples it names.",
        "",
        "| harness | kind | package | tested versions | classes recognised | run by the tests |",
        "|---|---|---|---|---|---|",
    ]
    for spec in table["harnesses"]:
        tested = spec.get("tested_versions") or []
        package = spec.get("package")
        classes = [c for c in CLASSES if any(r["class"] == c for r in spec["rules"])]
        real = "yes" if run_by_tests(spec, pins) else "no"
        out.append(
            f"| [{spec['title']}]({spec['name']}.md) `{spec['name']}` | {spec['kind']} | "
            f"{code(package) if package else '-'} | {', '.join(code(v) for v in tested) or 'none'} | "
            f"{', '.join(f'`{c}`' for c in classes) or 'none'} | {real} |"
        )
    out += [
        "",
        '"Run by the tests": the CLI is installed at that version from `tests/harnesses` (`make',
        f"harnesses`, part of `make test`) and run offline by `{REAL_TESTS}`:",
        "asked to resume a session that does not exist, each must exit and speak as its rules expect.",
        "",
        "## From the command line",
        "",
        "`continuity harness list` prints the table's harnesses (name, title, kind, tested versions,",
        "how many rules, whether the probe has files to look for; `--json` for a program).",
        "`continuity harness classify --harness NAME` reads one outcome as JSON on stdin",
        '(`{"exit_code", "stdout", "stderr", "error"}`) and prints the class and the rule that decided,',
        "exactly as the adapter does (exit code 0; 2 for a bad outcome or an unknown harness):",
        "",
        "```sh",
        f"echo '{outcome}' \\",
        f"  | continuity harness classify --harness {name}",
        "```",
        "",
        "```json",
        json.dumps(said, indent=2),
        "```",
        "",
    ]
    return "\n".join(out)


def pages() -> dict[str, str]:
    """Every page of docs/harnesses, by file name."""
    table, corpus, pins = load(TABLE), load(CORPUS), pinned()
    written = {"README.md": index(table, corpus, pins)}
    for spec in table["harnesses"]:
        cases = [c for c in corpus["cases"] if c["harness"] == spec["name"]]
        written[f"{spec['name']}.md"] = page(spec, cases, pins)
    return written


def stale(expected: dict[str, str], folder: Path = DOCS) -> list[str]:
    """The pages of `folder` that differ from `expected` (missing ones too), and extra pages."""
    differ = [
        name
        for name, text in expected.items()
        if not (folder / name).exists() or (folder / name).read_text() != text
    ]
    extra = [p.name for p in folder.glob("*.md") if p.name not in expected] if folder.exists() else []
    return sorted(differ + extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs")
    args = parser.parse_args(argv)
    expected = pages()
    if args.check:
        wrong = stale(expected)
        for name in wrong:
            print(f"docs/harnesses/{name} differs from the harness table", file=sys.stderr)
        return 1 if wrong else 0
    DOCS.mkdir(parents=True, exist_ok=True)
    for name, text in expected.items():
        (DOCS / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
