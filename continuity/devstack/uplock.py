"""One `continuity up` per data folder.

Two stacks in one folder would share the embedded servers' data and the env file, so `up`
holds an exclusive `flock` on `<data-dir>/up.lock` while it runs, and keeps a record of itself
in `<data-dir>/up.json`: its pid, the addresses once known, the processes it started, and a
digest of the env file it wrote. A second `up` reads that record to say which one is running.
The kernel releases the lock when its holder dies, even by SIGKILL; the next `up` then finds
the dead holder's record, stops the processes it left running (checked by their start time, so
a reused pid is never signalled), and removes its env file if nobody changed it since.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

LOCK_FILE = "up.lock"
RECORD_FILE = "up.json"
LEFTOVER_STOP_S = 15.0
"""How long a process a crashed `up` left running may take to stop before it is killed."""


@dataclass
class Process:
    """A process `up` started: its name, pid and start time (clock ticks after boot)."""

    name: str
    pid: int
    started: int


@dataclass
class Record:
    """What a running `up` says about itself in `<data-dir>/up.json`."""

    pid: int
    started: int = 0
    nats_url: str = ""
    redis_url: str = ""
    console_url: str = ""
    env_digest: str = ""
    processes: list[Process] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Record | None:
        try:
            raw = json.loads(text)
            processes = [Process(str(p["name"]), int(p["pid"]), int(p["started"])) for p in raw["processes"]]
            return cls(
                pid=int(raw["pid"]),
                started=int(raw["started"]),
                nats_url=str(raw["nats_url"]),
                redis_url=str(raw["redis_url"]),
                console_url=str(raw["console_url"]),
                env_digest=str(raw["env_digest"]),
                processes=processes,
            )
        except (ValueError, KeyError, TypeError):
            return None


class Busy(Exception):
    """Another `up` holds the folder; `record` is what it says about itself (None if it has
    not written it yet)."""

    def __init__(self, record: Record | None) -> None:
        super().__init__("another continuity up runs on this folder")
        self.record = record


def digest(path: Path) -> str:
    """sha256 of a file's bytes; "" when it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """When process `pid` started (field 22 of /proc/<pid>/stat); None when it is gone or a
    zombie (dead, waiting to be reaped), or when /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the name in parentheses may hold spaces
    if not fields or fields[0] in ("Z", "X"):
        return None
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


class UpLock:
    """The lock and the record of `up` on one data folder."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.record = Record(pid=os.getpid(), started=start_ticks(os.getpid()) or 0)
        self._fd: int | None = None

    @property
    def record_path(self) -> Path:
        return self.data_dir / RECORD_FILE

    def acquire(self) -> Record | None:
        """Takes the folder, or raises Busy at once. Returns the record a previous holder left
        behind when it did not stop cleanly (it died holding the lock), else None."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise Busy(self._read()) from None
        self._fd = fd
        previous = self._read()
        self.save()
        return previous if previous is not None and previous.pid != os.getpid() else None

    def _read(self) -> Record | None:
        try:
            return Record.parse(self.record_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return None

    def save(self) -> None:
        """Writes the record (replacing the file at once, so a reader never sees half of it)."""
        temporary = self.data_dir / f".{RECORD_FILE}.{os.getpid()}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(self.record), f)
        os.replace(temporary, self.record_path)

    def started(self, name: str, pid: int) -> None:
        """Notes a process this `up` started, for the next one should this one be killed."""
        self.record.processes.append(Process(name, pid, start_ticks(pid) or 0))
        self.save()

    def release(self) -> None:
        """Removes the record and lets the folder go (the lock file stays: removing it could
        let two processes lock two different files of the same name)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.record_path.unlink()
        os.close(self._fd)  # closing the descriptor releases the lock
        self._fd = None


def busy_message(data_dir: Path, record: Record | None) -> str:
    """One line naming the `up` that holds `data_dir`, and what to do."""
    if record is None:
        who, where = "another `continuity up`", "(it is starting)"
    else:
        who = f"another `continuity up` (pid {record.pid})"
        addresses = [
            f"{what} {url}"
            for what, url in (
                ("NATS", record.nats_url),
                ("Redis", record.redis_url),
                ("console", record.console_url),
            )
            if url
        ]
        where = f"({', '.join(addresses)})" if addresses else "(it is starting)"
    stop = f"kill {record.pid}" if record is not None else "Ctrl-C in its terminal"
    return (
        f"{who} already runs on {data_dir} {where}; stop it first ({stop}) or give this one "
        f"another --data-dir"
    )


def stop_leftovers(previous: Record, say: Callable[[str], None]) -> None:
    """Stops what a crashed `up` left running: services first (they drain), then the servers;
    only processes whose start time still matches the record (a pid may have been reused)."""
    alive = [p for p in previous.processes if p.started and start_ticks(p.pid) == p.started]
    if not alive:
        return
    names = ", ".join(f"{p.name} (pid {p.pid})" for p in alive)
    say(f"a previous `continuity up` (pid {previous.pid}) did not stop; stopping what it left: {names}")
    servers = [p for p in alive if p.name in ("nats-server", "redis-server")]
    _terminate([p for p in alive if p not in servers])
    _terminate(servers)


def _terminate(processes: Iterable[Process]) -> None:
    processes = list(processes)
    for p in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + LEFTOVER_STOP_S
    while any(_running(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.05)  # not our children: their exit is seen in /proc, polled with a deadline
    killed = [p for p in processes if _running(p)]
    for p in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(_running(p) for p in killed) and time.monotonic() < deadline:
        time.sleep(0.05)  # a killed server may hold its files a moment longer


def _running(p: Process) -> bool:
    return start_ticks(p.pid) == p.started
