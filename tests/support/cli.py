"""The `continuity` command as an operator runs it: a process of its own against a NATS URL."""

from __future__ import annotations

import asyncio
import os
import sys


async def run_cli(url: str, *args: str, columns: int | None = None) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `continuity ARGS --nats-url URL`; `columns` sets the
    width its tables fit (`COLUMNS`)."""
    env = {**os.environ, "COLUMNS": str(columns)} if columns is not None else None
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "continuity",
        *args,
        "--nats-url",
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
