"""Ships the harness table inside the package: the repository's canonical sdk/harnesses.json
becomes continuity_runner/harness/harnesses.json in the sdist and the wheel. A wheel built from
the sdist finds it already in the package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SHIPPED = "continuity_runner/harness/harnesses.json"


class HarnessTable(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        canonical = Path(self.root).parent / "harnesses.json"  # a checkout: sdk/harnesses.json
        if canonical.is_file():
            build_data["force_include"][str(canonical)] = SHIPPED
        elif not (Path(self.root) / SHIPPED).is_file():  # an unpacked sdist carries it
            raise FileNotFoundError(f"the harness table is missing: neither {canonical} nor {SHIPPED}")
