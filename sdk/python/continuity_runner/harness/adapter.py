"""One harness of the table, as a runner uses it: `adapter("claude-code")`."""

from __future__ import annotations

import re

from continuity_runner.harness.match import Assessment, OutcomeInput, assess_with
from continuity_runner.harness.probe import Env, Presence, probe_sessions
from continuity_runner.harness.table import Capabilities, Harness, Table, shipped_table
from continuity_runner.harness.versions import satisfies


class UnknownHarness(LookupError):
    """A harness name the table does not have."""

    def __init__(self, harness: str, known: list[str]) -> None:
        super().__init__(f"no harness {harness!r} in the table (known: {', '.join(known)})")
        self.harness = harness


class Adapter:
    """The rules, capabilities and session layout of one harness."""

    def __init__(self, spec: Harness) -> None:
        self.spec = spec
        self.name = spec.name
        self._session_id = re.compile(spec.session_id)

    def __repr__(self) -> str:
        return f"Adapter({self.name!r})"

    def assess(self, outcome: OutcomeInput) -> Assessment:
        """The first rule of the harness whose conditions hold for `outcome` decides: its class
        (`failure_class` None: not a failure) and its id. `InvalidRequest` for an outcome of the
        wrong types (naming the field), or larger than 4 MiB in all (`payload_too_large`)."""
        return assess_with(self.spec.rules, outcome)

    def is_session_id(self, session_id: str) -> bool:
        """Whether `session_id` is one of this harness's session ids."""
        return isinstance(session_id, str) and self._session_id.fullmatch(session_id) is not None

    def probe(self, session_id: str, *, cwd: str | None = None, env: Env | None = None) -> Presence:
        """Whether the session is on this host: `present`, `absent` (also, without touching the
        disk, for an id that is not one of this harness's), or `unknown`. `cwd` is the working
        directory the session was saved in (harnesses that key sessions by it), `env` the
        environment the harness runs with (its root variable, HOME; default `os.environ`). Only
        `stat` and `scandir`: no file is opened."""
        return probe_sessions(self.spec.sessions, self._session_id, session_id, cwd, env)

    def capabilities(self, version: str) -> Capabilities | None:
        """What `version` of the harness can do: the first entry whose range holds it; None for
        a version the table does not cover (untested) or a string that is not a version."""
        return next((c for c in self.spec.capabilities if satisfies(version, c.versions)), None)


def names(table: Table | None = None) -> list[str]:
    """The names of the table's harnesses, in its order."""
    return [h.name for h in (table or shipped_table()).harnesses]


def adapter(name: str, table: Table | None = None) -> Adapter:
    """The adapter of harness `name` (`UnknownHarness` for a name the table does not have);
    `table` defaults to the shipped one."""
    table = table or shipped_table()
    spec = table.harness(name)
    if spec is None:
        raise UnknownHarness(name, names(table))
    return Adapter(spec)
