"""`continuity up`: embedded servers, every service, where they listen, a clean Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.support import read_until


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_up_runs_every_service_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "REDIS_URL")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "continuity", "up", "--data-dir", str(tmp_path / "data")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        text = read_until(proc, "Ctrl-C stops everything", 60)
        assert "Ctrl-C stops everything" in text, text
        assert re.search(r"NATS\s+nats://127\.0\.0\.1:\d+\s+\(embedded\)", text), text
        assert re.search(r"Redis\s+redis://127\.0\.0\.1:\d+/0\s+\(embedded\)", text), text
        urls = dict(re.findall(r"^(\S+)\s+metrics (http://\S+)/metrics", text, re.M))
        assert set(urls) == {"session-store", "classifier", "archiver", "reconciliation", "console"}, text
        console = re.search(r"^console\s+(http://127\.0\.0\.1:\d+/)\s+sign-in token in (\S+)$", text, re.M)
        assert console, text
        assert oct(Path(console.group(2)).stat().st_mode & 0o777) == "0o600"
        assert _ready(f"{console.group(1)}login")
        assert all(_ready(f"{u}/readyz") for u in urls.values())
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert not any(_ready(f"{u}/healthz") for u in urls.values())
        logs = {name: (tmp_path / "data" / f"{name}.log").read_text() for name in urls}
        assert all('"event":"service_stopped"' in log for log in logs.values()), logs
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
