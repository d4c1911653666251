"""The harness table: for each agent harness, its session ids, what each version can do, where it
keeps its sessions (the presence probe) and the ordered rules that turn a failed resume's outcome
into a closed failure class.

The table ships inside this package (`harnesses.json`, beside this module, copied there from the
repository's canonical `sdk/harnesses.json` when a wheel is built; a checkout reads the canonical
file). It is decoded into the Structs below, then checked (`InvalidTable` names where it does not
hold): rule ids unique and prefixed by their harness, every class a harness class of the contract,
every harness's rules total, version ranges, session id patterns and path templates well formed.
The TypeScript SDK ships the same file and checks it alike.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

import msgspec
from msgspec import UNSET, UnsetType

from continuity_runner.harness.versions import parse_range

HarnessClass = Literal[
    "native_session_missing", "context_overflow", "transcript_corrupt", "session_busy", "unclassified"
]
"""The failure classes a harness rule may name: the contract's harness classes (4.3) and
`unclassified`. A rule's class null means "not a failure"."""
HARNESS_CLASSES: tuple[HarnessClass, ...] = get_args(HarnessClass)
HarnessKind = Literal["cli", "sdk", "protocol"]
CwdKeyScheme = Literal["claude"]
"""How a working directory becomes the folder name a harness keeps its sessions under."""
CWD_KEY_SCHEMES: tuple[CwdKeyScheme, ...] = get_args(CwdKeyScheme)
ExitCondition = Literal["zero", "nonzero", "none", "any"]
PLACEHOLDERS = ("{session_id}", "{session_id_8}", "{cwd_key}")
"""What a path template may name: the session id, its first 8 characters (all of it when
shorter), and the working directory's key."""

RULE_ID = re.compile(r"[a-z0-9][a-z0-9.-]{0,63}")
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
MAX_SAFE_INT = 2**53 - 1

_Struct: dict[str, Any] = {"forbid_unknown_fields": True, "frozen": True, "kw_only": True}


class JsonCondition(msgspec.Struct, **_Struct):
    """One item of a `json` condition: `path` (dot-separated object keys) and exactly one of
    `equals`, `in`, `contains`, `present`."""

    path: str
    equals: Any = UNSET
    in_: list[Any] | UnsetType = msgspec.field(default=UNSET, name="in")
    contains: str | UnsetType = UNSET
    present: bool | UnsetType = UNSET


class When(msgspec.Struct, **_Struct):
    """A rule's conditions; each one present must hold (see `match`)."""

    exit: ExitCondition | list[int] | UnsetType = UNSET
    json: list[JsonCondition] | UnsetType = UNSET
    error: bool | UnsetType = UNSET
    """True: the outcome has an `error` (an SDK's exception); False: it has none."""
    error_type: list[str] | UnsetType = UNSET
    error_code: list[str | int] | UnsetType = UNSET
    text: list[str] | UnsetType = UNSET
    unless_text: list[str] | UnsetType = UNSET


class Rule(msgspec.Struct, **_Struct):
    id: str
    failure_class: HarnessClass | None = msgspec.field(name="class")
    when: When
    evidence: list[str]
    """Where the shape was seen: `real: <package> <version> offline`, an issue (`claude-code#5768`),
    or `source: ...`."""
    note: str


class Capabilities(msgspec.Struct, **_Struct):
    """What the versions in `versions` (a range) of a harness can do."""

    versions: str
    resume_keeps_id: bool
    """A resumed session keeps its id (else commit the id the harness answers with)."""
    load: str
    """How a saved session is loaded (`resume`, `thread/resume`, `session/load`...)."""
    fork: bool
    background_agents: bool
    lock: bool
    """The harness refuses a second writer of a session."""
    notes: str


class Root(msgspec.Struct, **_Struct):
    env: str | None
    """The environment variable that moves the root, or null."""
    default: str
    """The root when `env` is unset or empty; `~` is the probe's HOME."""


class Sessions(msgspec.Struct, **_Struct):
    """Where a harness keeps its sessions on the host (the presence probe)."""

    root: Root
    paths: list[str]
    """Relative to the root, `/`-separated; `{session_id}`, `{session_id_8}`, `{cwd_key}`, and
    `*` within one segment."""
    cwd_key: CwdKeyScheme | None
    keyed_by: list[Literal["cwd", "session_id"]]
    notes: str


class Harness(msgspec.Struct, **_Struct):
    name: str
    title: str
    kind: HarnessKind
    package: str | None
    tested_versions: list[str]
    invocation: str
    session_id: str
    """A regular expression, anchored with ^ and $, that a session id of this harness matches."""
    capabilities: list[Capabilities]
    sessions: Sessions | None
    """None: the harness keeps no files the probe can read (its probe answers `unknown`)."""
    rules: list[Rule]


class Table(msgspec.Struct, **_Struct):
    format: Literal[1]
    version: str
    harnesses: list[Harness]

    def harness(self, name: str) -> Harness | None:
        return next((h for h in self.harnesses if h.name == name), None)


class InvalidTable(ValueError):
    """The table does not hold to its format; `path` says where (`harnesses[0].rules[3].when`)."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


_decoder = msgspec.json.Decoder(Table)
_MSGSPEC_WHERE = re.compile(r"^(?P<what>.*) - at `\$(?P<path>[^`]*)`$", re.DOTALL)


def validate_table(data: bytes | str) -> Table:
    """`data` (the table's JSON) as a `Table`, once it holds to the format; else `InvalidTable`."""
    try:
        table = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        m = _MSGSPEC_WHERE.match(str(exc))
        path = "table" + (m.group("path") if m else "")
        raise InvalidTable(path, m.group("what") if m else str(exc)) from None
    except msgspec.DecodeError as exc:
        raise InvalidTable("table", f"is not JSON ({exc})") from None
    check(table)
    return table


def load_table(path: str | Path) -> Table:
    """Reads and checks a table file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidTable("table", f"cannot be read ({exc.strerror})") from None
    return validate_table(data)


def shipped_path() -> Path:
    """The table this package ships: beside this module in an installed package, else (a
    checkout, an editable install) the repository's canonical sdk/harnesses.json."""
    packaged = resources.files("continuity_runner.harness").joinpath("harnesses.json")
    if packaged.is_file():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "harnesses.json"


@functools.cache
def shipped_table() -> Table:
    """The shipped table, read and checked once."""
    return load_table(shipped_path())


# ---- the checks -------------------------------------------------------------------------------


def check(table: Table) -> None:
    """What the Structs cannot say: `InvalidTable` naming the first place that does not hold."""
    if not table.version:
        raise InvalidTable("table.version", "must not be empty")
    if not table.harnesses:
        raise InvalidTable("table.harnesses", "must hold at least one harness")
    names: set[str] = set()
    ids: set[str] = set()
    for i, harness in enumerate(table.harnesses):
        where = f"table.harnesses[{i}]"
        _check_harness(harness, where)
        if harness.name in names:
            raise InvalidTable(f"{where}.name", f"{harness.name} is named twice")
        names.add(harness.name)
        for j, rule in enumerate(harness.rules):
            if rule.id in ids:
                raise InvalidTable(f"{where}.rules[{j}].id", f"{rule.id} is used twice")
            ids.add(rule.id)


def _nonempty(value: str, where: str) -> None:
    if not value:
        raise InvalidTable(where, "must not be empty")


def _check_harness(h: Harness, where: str) -> None:
    if not NAME.fullmatch(h.name):
        raise InvalidTable(f"{where}.name", f"must match ^{NAME.pattern}$")
    for field in ("title", "invocation"):
        _nonempty(getattr(h, field), f"{where}.{field}")
    if h.package is not None:
        _nonempty(h.package, f"{where}.package")
    for k, version in enumerate(h.tested_versions):
        _nonempty(version, f"{where}.tested_versions[{k}]")
    _check_session_id(h.session_id, f"{where}.session_id")
    for k, caps in enumerate(h.capabilities):
        try:
            parse_range(caps.versions)
        except ValueError as exc:
            raise InvalidTable(f"{where}.capabilities[{k}].versions", str(exc)) from None
        _nonempty(caps.load, f"{where}.capabilities[{k}].load")
    if h.sessions is not None:
        _check_sessions(h.sessions, f"{where}.sessions")
    if len(h.rules) < 2:
        raise InvalidTable(f"{where}.rules", "must hold at least the two final rules")
    for k, rule in enumerate(h.rules):
        _check_rule(rule, f"{where}.rules[{k}]", h.name)
    _check_total(h.rules, where, h.name)


def _check_session_id(pattern: str, where: str) -> None:
    if not pattern.startswith("^") or not pattern.endswith("$") or pattern.endswith("\\$"):
        raise InvalidTable(where, "must be anchored with ^ and $")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidTable(where, f"is not a regular expression ({exc})") from None


def _check_sessions(s: Sessions, where: str) -> None:
    if s.root.env is not None:
        _nonempty(s.root.env, f"{where}.root.env")
    _nonempty(s.root.default, f"{where}.root.default")
    if not s.paths:
        raise InvalidTable(f"{where}.paths", "must hold at least one path")
    for k, template in enumerate(s.paths):
        at = f"{where}.paths[{k}]"
        if template.startswith("/") or any(seg in ("", ".", "..") for seg in template.split("/")):
            raise InvalidTable(at, "must be a relative path of non-empty segments, without . or ..")
        rest = template
        for placeholder in PLACEHOLDERS:
            rest = rest.replace(placeholder, "")
        if "{" in rest or "}" in rest:
            raise InvalidTable(at, "names a placeholder other than " + ", ".join(PLACEHOLDERS))
        if "{cwd_key}" in template and s.cwd_key is None:
            raise InvalidTable(at, "uses {cwd_key} without a cwd_key scheme")
        if "**" in template or "\\" in template or "\0" in template:
            raise InvalidTable(at, "* matches within one segment: no ** (nor a backslash or NUL)")


def _strings(values: list[str], where: str) -> None:
    if not values:
        raise InvalidTable(where, "must hold at least one")
    for k, value in enumerate(values):
        _nonempty(value, f"{where}[{k}]")


def _check_rule(rule: Rule, where: str, harness: str) -> None:
    if not RULE_ID.fullmatch(rule.id):
        raise InvalidTable(f"{where}.id", f"must match ^{RULE_ID.pattern}$")
    if not rule.id.startswith(f"{harness}."):
        raise InvalidTable(f"{where}.id", f"must start with {harness}.")
    _strings(rule.evidence, f"{where}.evidence")
    w, at = rule.when, f"{where}.when"
    if isinstance(w.exit, list) and not w.exit:
        raise InvalidTable(f"{at}.exit", "must be a non-empty list of integers")
    if isinstance(w.exit, list) and any(abs(code) > MAX_SAFE_INT for code in w.exit):
        raise InvalidTable(f"{at}.exit", "holds an integer beyond 2^53 - 1")
    if not isinstance(w.json, UnsetType):
        if not w.json:
            raise InvalidTable(f"{at}.json", "must hold at least one condition")
        for k, item in enumerate(w.json):
            _check_json(item, f"{at}.json[{k}]")
    for field in ("error_type", "text", "unless_text"):
        values = getattr(w, field)
        if not isinstance(values, UnsetType):
            _strings(values, f"{at}.{field}")
    if not isinstance(w.error_code, UnsetType):
        if not w.error_code:
            raise InvalidTable(f"{at}.error_code", "must hold at least one")
        for k, code in enumerate(w.error_code):
            if code == "" or (isinstance(code, int) and abs(code) > MAX_SAFE_INT):
                raise InvalidTable(f"{at}.error_code[{k}]", "must be a non-empty string or a safe integer")


def _check_json(item: JsonCondition, where: str) -> None:
    if not item.path or any(key == "" for key in item.path.split(".")):
        raise InvalidTable(f"{where}.path", "must be dot-separated keys")
    operators = [
        name
        for name, value in (
            ("equals", item.equals),
            ("in", item.in_),
            ("contains", item.contains),
            ("present", item.present),
        )
        if value is not UNSET
    ]
    if len(operators) != 1:
        raise InvalidTable(where, "must hold path and exactly one of equals, in, contains, present")
    if isinstance(item.in_, list) and not item.in_:
        raise InvalidTable(f"{where}.in", "must hold at least one value")
    if item.contains == "":
        raise InvalidTable(f"{where}.contains", "must not be empty")
    if item.present is False:
        raise InvalidTable(f"{where}.present", "must be true")


def _is_any(when: When) -> bool:
    """`when` holds for any outcome: no condition, or only `exit: any`."""
    return when == When() or when == When(exit="any")


def _check_total(rules: list[Rule], where: str, harness: str) -> None:
    """Every harness's rules end with `<name>.failure` (exit nonzero, unclassified) and a rule for
    any outcome (class null), so that every outcome is decided."""
    failure, last = rules[-2], rules[-1]
    if (
        failure.id != f"{harness}.failure"
        or failure.failure_class != "unclassified"
        or failure.when != When(exit="nonzero")
    ):
        raise InvalidTable(
            f"{where}.rules", f"must end with {harness}.failure: exit nonzero, class unclassified"
        )
    if last.failure_class is not None or not _is_any(last.when):
        raise InvalidTable(f"{where}.rules", "must end with a rule for any outcome, class null")
