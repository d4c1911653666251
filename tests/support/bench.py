"""A `continuity bench` run as a user runs it: its own process, `--json`, the object it printed."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def bench_json(kind: str, *args: str, timeout: float = 90) -> dict[str, Any]:
    """`continuity bench <kind> <args> --json`: the object printed; its stderr's tail on failure."""
    proc = subprocess.run(
        [sys.executable, "-m", "continuity", "bench", kind, *args, "--json"],
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result
