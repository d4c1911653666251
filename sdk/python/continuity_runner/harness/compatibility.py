"""The compatibility generation from named components (contract 3.2, 3.3 and 9.11).

A harness adapter says what a saved native session depends on as named components instead of
one hand-typed string; the generation is a digest of them:

```python
components = Components(
    executable=executable("claude-code", "2.1.332"),  # "claude-code@2.1"
    protocol="stream-json",
    model_route="anthropic/claude-sonnet-4",
    reasoning_effort="high",
    mcp_servers={"github", "linear"},
    permission_mode="acceptEdits",
    cwd="/work/acme/",
)
await runner.commit(..., compatibility_components=components)  # the generation comes with them
```

The algorithm, which the TypeScript SDK implements identically (sdk/compatibility-vectors.json
holds inputs and the digests both must compute):

- Each component present is canonicalised, then written as canonical JSON: a string component
  as a JSON string, a set component (`plugins`, `mcp_servers`) as a JSON array of its distinct
  strings sorted by code point (the order given never matters), `cwd` as a JSON string of the
  canonical path (below). JSON strings escape only `"`, `\\` and U+0000 to U+001F (`\\b`, `\\t`,
  `\\n`, `\\f`, `\\r`, else `\\u00xx` in lower case), everything else is written as is (UTF-8);
  arrays have no spaces. Strings are not Unicode-normalised, and a lone surrogate is refused.
- A component's digest is the lowercase hex SHA-256 of its canonical JSON's UTF-8 bytes.
- The generation is the lowercase hex SHA-256 of the lines `<name>=<digest>`, one per component
  present, sorted by name, joined by `\\n` (no final line break).
- A missing component (None) is not in the generation at all; an empty one (`""`, an empty set)
  is, with the digest of `""` or `[]`: the two are different generations.
- `cwd` must be absolute (`/...`). Its canonical form joins the path's segments with single
  slashes, drops `.` segments and a trailing slash, and keeps `..` segments as they are: it
  never resolves a symbolic link nor reads the disk, and `..` is not folded, because folding it
  is only right where no segment is a link. An adapter that wants the physical directory passes
  `os.path.realpath(cwd)` itself.

Only component names ever leave the runner with a reason (`changed_components`): the values
stay here, and the digests travel only in a commit or a decide.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Protocol, get_args

from continuity_runner.checks import check_value
from continuity_runner.errors import InvalidRequest
from continuity_runner.types import ComponentDigests, ComponentName

COMPONENT_NAMES: tuple[ComponentName, ...] = get_args(ComponentName)
"""The closed component names, sorted: the order of the generation's lines."""

SET_COMPONENTS: frozenset[str] = frozenset({"mcp_servers", "plugins"})
"""Components whose value is a set of strings: order and repetition do not matter."""

PATH_COMPONENTS: frozenset[str] = frozenset({"cwd"})
"""Components whose value is an absolute path, canonicalised without touching the disk."""

DIGEST_PATTERN = re.compile(r"^[0-9a-f]{64}\Z")

_VERSION = re.compile(r"^([0-9]+)\.([0-9]+)(?:\.[0-9]+)?(?:[-+].*)?\Z")


def executable(harness: str, version: str) -> str:
    """The `executable` component of a harness at a version: its name and tested family,
    `MAJOR.MINOR` (`executable("claude-code", "2.1.332")` is `claude-code@2.1`); a pre-release
    or build suffix is ignored, as version ranges ignore it."""
    found = _VERSION.match(version)
    if not harness or found is None:
        raise ValueError("executable needs a harness name and a MAJOR.MINOR[.PATCH] version")
    return f"{harness}@{int(found[1])}.{int(found[2])}"


def canonical_path(path: str) -> str:
    """An absolute POSIX path with single slashes, no `.` segment and no trailing slash; `..`
    segments are kept (see the module's text)."""
    _check_text(path, "cwd")
    if not path.startswith("/"):
        raise ValueError("cwd must be an absolute path")
    if "\x00" in path:
        raise ValueError("cwd must not contain NUL")
    segments = [segment for segment in path.split("/") if segment not in ("", ".")]
    return "/" + "/".join(segments)


def canonical_value(name: str, value: object) -> str | tuple[str, ...]:
    """`value` of component `name` canonicalised: a string, or for a set component a tuple of
    distinct strings sorted by code point."""
    if name not in COMPONENT_NAMES:
        raise ValueError(f"unknown compatibility component {name!r}")
    if name in SET_COMPONENTS:
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise TypeError(f"{name} must be a collection of strings")
        items = list(value)
        for item in items:
            _check_text(item, name)
        return tuple(sorted(set(items)))
    _check_text(value, name)
    assert isinstance(value, str)
    return canonical_path(value) if name in PATH_COMPONENTS else value


def canonical_json(name: str, value: object) -> str:
    """The canonical JSON text of component `name`'s value."""
    canonical = canonical_value(name, value)
    if isinstance(canonical, tuple):
        return "[" + ",".join(_json_string(item) for item in canonical) + "]"
    return _json_string(canonical)


def component_digest(name: str, value: object) -> str:
    """The lowercase hex SHA-256 of the canonical JSON of the value."""
    return hashlib.sha256(canonical_json(name, value).encode("utf-8")).hexdigest()


def generation_of(digests: Mapping[str, str]) -> str:
    """The generation of components given by their digests: the SHA-256 of the sorted
    `name=digest` lines joined by `\\n`."""
    if not digests:
        raise ValueError("a generation needs at least one component")
    for name, digest in digests.items():
        if name not in COMPONENT_NAMES:
            raise ValueError(f"unknown compatibility component {name!r}")
        if not isinstance(digest, str) or not DIGEST_PATTERN.match(digest):
            raise ValueError(f"the digest of {name} is not 64 lowercase hex digits")
    lines = "\n".join(f"{name}={digests[name]}" for name in sorted(digests))
    return hashlib.sha256(lines.encode("ascii")).hexdigest()


def changed_components(saved: Mapping[str, str], ready: Mapping[str, str]) -> list[str]:
    """The names of the components whose digests differ, or that one side has and the other
    lacks, sorted."""
    return sorted(name for name in set(saved) | set(ready) if saved.get(name) != ready.get(name))


@dataclass(frozen=True, slots=True)
class Components:
    """The components of one harness process. None is a missing component; every value given
    is canonicalised when the object is made (a wrong type or a relative `cwd` raises)."""

    composition: str | None = None
    """The composition's generation: the adapter's own layering (system prompt, tools, agents)."""
    cwd: str | None = None
    """The working directory, absolute (canonicalised, symbolic links not resolved)."""
    executable: str | None = None
    """The harness and its tested family (`claude-code@2.1`, see `executable`)."""
    mcp_servers: Iterable[str] | None = None
    """The set of MCP servers the session was started with (order does not matter)."""
    model_route: str | None = None
    """The model and the route to it (`anthropic/claude-sonnet-4`, a gateway's route name)."""
    permission_mode: str | None = None
    plugins: Iterable[str] | None = None
    """The set of plugins and their generations (`name@version` strings, say)."""
    protocol: str | None = None
    """The wire protocol and its generation between the runner and the harness."""
    reasoning_effort: str | None = None

    def __post_init__(self) -> None:
        for name in COMPONENT_NAMES:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, canonical_value(name, value))

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> Components:
        """From `{name: value}` (a None value is a missing component); an unknown name raises."""
        unknown = sorted(set(values) - set(COMPONENT_NAMES))
        if unknown:
            raise ValueError(f"unknown compatibility components {unknown}")
        return cls(**values)  # type: ignore[arg-type]

    def names(self) -> tuple[str, ...]:
        """The components present, sorted."""
        return tuple(name for name in COMPONENT_NAMES if getattr(self, name) is not None)

    def canonical(self) -> dict[str, str]:
        """`{name: canonical JSON}` of the components present."""
        return {name: canonical_json(name, getattr(self, name)) for name in self.names()}

    def digests(self) -> dict[str, str]:
        """`{name: digest}` of the components present, sorted by name: what a commit and a
        decide carry (`compatibility_components`, `ready_components`)."""
        return {
            name: hashlib.sha256(text.encode("utf-8")).hexdigest() for name, text in self.canonical().items()
        }

    @property
    def generation(self) -> str:
        """The compatibility generation of these components (64 lowercase hex digits)."""
        return generation_of(self.digests())

    def changed_from(self, saved: Components) -> list[str]:
        """The names of the components that differ from `saved`'s, sorted."""
        return changed_components(saved.digests(), self.digests())


assert tuple(f.name for f in fields(Components)) == COMPONENT_NAMES


class HasDigests(Protocol):
    def digests(self) -> Mapping[str, str]: ...


def on_the_wire(
    components: HasDigests | Mapping[str, str], generation: str | None, field: str, generation_field: str
) -> tuple[dict[str, str], str]:
    """What a commit or a decide carries of `components` (a `Components`, or `{name: digest}`)
    and the generation sent with them: the generation they make when none is given. Raises
    `InvalidRequest`, naming the field, for digests outside the contract or a generation they do
    not make (the session-store refuses both, 400 `invalid_field`)."""
    digests = dict(components.digests() if hasattr(components, "digests") else components)  # type: ignore[union-attr]
    check_value(digests, ComponentDigests, field)
    made = generation_of(digests)
    if generation is None:
        return digests, made
    if generation != made:
        raise InvalidRequest(f"{field} are not the components of {generation_field}", field=field)
    return digests, generation


def _check_text(value: object, name: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not Unicode text (a lone surrogate)") from None


def _json_string(value: str) -> str:
    # Python's escaping with ensure_ascii off is JSON.stringify's for text without a lone
    # surrogate: `"`, `\`, the short escapes and \u00xx (lower case) for the other controls.
    return json.dumps(value, ensure_ascii=False)
