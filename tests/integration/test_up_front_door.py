"""`continuity up` as a newcomer meets it: from an empty folder against existing servers, the
addresses and runner keys shared in `.continuity/env` for the next commands, `simulate` against
it with no setup, failures named within seconds, and output as a person sees it."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import pty
import queue
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from continuity.devstack.servers import NatsServer, RedisServer, free_port
from services import registry

CLI = str(Path(sys.executable).parent / "continuity")
CLEAN = ("NATS_URL", "REDIS_URL", "CONTINUITY_RUNNER_KEYS", "CONTINUITY_ARCHIVE_TIMEOUT_S")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    return {**env, **extra}


class Up:
    """`continuity up` as its own process, its output read line by line with deadlines."""

    def __init__(self, cwd: Path, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [CLI, "up", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.ended = False
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def until(self, marker: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while marker not in "".join(self.lines) and not self.ended:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no {marker!r} within {timeout}s: {''.join(self.lines)}") from None
            if line is None:
                self.ended = True
                break
            self.lines.append(line)
        return "".join(self.lines)

    def _collect(self) -> None:
        """What it has printed so far, without waiting for more."""
        with contextlib.suppress(queue.Empty):
            while (line := self._queue.get_nowait()) is not None:
                self.lines.append(line)

    def finish(self, timeout: float = 45) -> int:
        """Its exit code; `up` bounds its own stop (15 s for the services' drain, 10 s for the
        servers, which stop together), so a longer wait is a failure, told with what it said."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._collect()
            raise AssertionError(f"`up` did not stop within {timeout}s: {''.join(self.lines)}") from None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Up, str]]:
    """`up` started in an empty folder against servers of this module's own (as NATS_URL /
    REDIS_URL); yields the folder, the process and what it printed once ready."""
    root = tmp_path_factory.mktemp("front-door")
    nats, redis = NatsServer(root / "nats"), RedisServer(root / "redis")
    nats.start()
    redis.start()
    folder = root / "empty"
    folder.mkdir()
    up = Up(folder, clean_env(NATS_URL=nats.url, REDIS_URL=redis.url))
    try:
        text = up.until("Ctrl-C stops everything")
        yield folder, up, text
    finally:
        if up.proc.poll() is None:
            up.proc.send_signal(signal.SIGINT)
        up.finish()
        nats.stop()
        redis.stop()


def test_up_from_an_empty_folder_prints_and_shares_the_addresses(stack: tuple[Path, Up, str]) -> None:
    folder, _, text = stack
    exports = re.search(r"export NATS_URL=(\S+) REDIS_URL=(\S+)", text)
    assert exports, text
    env_file = folder / ".continuity" / "env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    shared = env_file.read_text()
    assert f"export NATS_URL={exports[1]}\n" in shared and f"export REDIS_URL={exports[2]}\n" in shared
    assert "export CONTINUITY_RUNNER_KEYS=dev-k1=" in shared
    assert "dev-k1=" not in text  # the keys are in the file, never printed
    assert "export PATH=" in text


def test_a_second_command_reads_the_env_file_and_a_set_variable_wins(stack: tuple[Path, Up, str]) -> None:
    folder, _, _ = stack
    found = cli(folder, "sessions", "get", "--tenant", "t", "--conversation", "c", "--agent", "a", "--json")
    assert found.returncode == 3, found.stderr
    assert json.loads(found.stdout)["error"]["message"] == "session t/c/a is not known here (no such record)"
    closed = f"nats://127.0.0.1:{free_port()}"
    elsewhere = cli(folder, "runs", "show", "run-1", env=clean_env(NATS_URL=closed))
    assert elsewhere.returncode == 4 and f"cannot connect to NATS at {closed}" in elsewhere.stderr


def test_simulate_against_up_needs_no_setup(stack: tuple[Path, Up, str]) -> None:
    folder, _, _ = stack
    run = cli(folder, "simulate", "--events", "40", "--archive-timeout-rate", "0", "--seed", "7", "--json")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["contradictions"] == [] and result["events"] >= 40
    assert result["operator"]["present"] is True
    # Progress not on a terminal: a line per change, no redraws, none repeated, within 100 columns.
    lines = run.stderr.splitlines()
    assert lines and "\r" not in run.stderr
    counts = [line.split("] ", 1)[1] for line in lines]
    assert all(a != b for a, b in itertools.pairwise(counts)), lines
    assert all(len(line) <= 100 for line in lines), lines


def test_simulate_without_operator_leaves_stopped_runs_for_a_person(stack: tuple[Path, Up, str]) -> None:
    folder, _, _ = stack
    run = cli(folder, "simulate", "--scenario", "pending", "--no-operator", "--events", "3", "--json", "-q")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert set(result["scenarios"]) == {"pending"}
    assert result["operator"] == {"present": False}
    assert set(result["decisions"]) == {"reconcile"}  # nobody resolved: no continue_fresh
    listed = cli(folder, "reconciliations", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["items"]) >= 3


def test_simulate_progress_redraws_in_place_on_a_terminal(stack: tuple[Path, Up, str]) -> None:
    folder, _, _ = stack
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(
        [CLI, "simulate", "--seconds", "2.5", "--rate", "10", "--archive-timeout-rate", "0"],
        cwd=folder,
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the other end closed: the process is done
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(60) == 0
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = seen.decode()
    draws = text.split("\r")
    assert len(draws) >= 3, text  # one line, drawn again each second
    assert text.count("\n") <= 2, text  # not a line per update
    assert all(len(d.replace("\x1b[K", "").strip()) < 80 for d in draws), text


def test_up_names_an_unreachable_server_at_once(tmp_path: Path) -> None:
    nats = f"nats://ops:pw-Secret-9@127.0.0.1:{free_port()}"
    started = time.monotonic()
    up = Up(tmp_path, clean_env(NATS_URL=nats, REDIS_URL="redis://127.0.0.1:1/0"))
    text = up.until("stopping", timeout=20)
    assert up.finish() == 4, text
    assert time.monotonic() - started < 20
    assert re.search(r"NATS at nats://127\.0\.0\.1:\d+ \(NATS_URL\) is not reachable", text), text
    assert "pw-Secret-9" not in text and "Traceback" not in text


def test_up_names_a_bad_variable_on_the_terminal(tmp_path: Path, redis_server: RedisServer) -> None:
    folder = tmp_path / "new"
    folder.mkdir()
    up = Up(folder, clean_env(CONTINUITY_LOG_LEVEL="LOUD", REDIS_URL=redis_server.url))
    text = up.until("\n", timeout=20)
    assert up.finish() == 2, text
    assert "configuration error: CONTINUITY_LOG_LEVEL: must be one of" in text, text


def test_sigterm_while_starting_stops_promptly(tmp_path: Path) -> None:
    up = Up(tmp_path, clean_env())
    data = tmp_path / ".continuity"
    deadline = time.monotonic() + 60
    while not (data / "session-store.log").exists():  # the services are being started
        assert up.proc.poll() is None and time.monotonic() < deadline, "".join(up.lines)
        time.sleep(0.01)  # polling for the file with a deadline
    up.proc.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    code = up.finish(timeout=10)
    assert time.monotonic() - stopped < 8
    assert code in (0, 130)
    assert not (data / "env").exists()


def test_no_service_answering_names_the_service(tmp_path: Path) -> None:
    nats = NatsServer(tmp_path / "nats")
    nats.start()
    try:
        env = clean_env(NATS_URL=nats.url)
        session = ("--tenant", "t", "--conversation", "c", "--agent", "a")
        got = cli(tmp_path, "sessions", "get", *session, env=env)
        shown = cli(tmp_path, "runs", "show", "run-1", env=env)
    finally:
        nats.stop()
    assert got.returncode == shown.returncode == 4
    assert "no session-store service is answering continuity.sessions.get" in got.stderr
    assert "no reconciliation service is answering continuity.runs.get" in shown.stderr


def test_the_demo_says_what_it_does_at_once_and_fits_100_columns(tmp_path: Path) -> None:
    demo = subprocess.run(
        [CLI, "up", "--demo", "--demo-seconds", "4"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "contradictions: 0" in demo.stdout
    long = [line for line in (demo.stdout + demo.stderr).splitlines() if len(line) > 100]
    assert long == []
    # Its first line comes before the servers start, then a line as each step begins; the
    # addresses once everything is ready, and the demo's own lines after those.
    lines = demo.stdout.splitlines()
    assert lines[0] == "starting NATS and Redis under .continuity/ ...", lines[:3]
    steps = [
        lines.index(f"starting the services: {', '.join(registry.available())} ..."),
        next(i for i, line in enumerate(lines) if line.startswith("ready in ")),
        next(i for i, line in enumerate(lines) if re.match(r"NATS\s+nats://\S+\s+\(embedded\)", line)),
        next(i for i, line in enumerate(lines) if line.startswith("Demo: ")),
    ]
    assert 0 < steps[0] and steps == sorted(steps), lines[:12]


def test_up_waits_while_redis_loads_its_data(tmp_path: Path) -> None:
    """Right after a restart Redis answers LOADING until its data is in memory; `up` waits
    for it (saying so) instead of calling the server unreachable."""
    data = tmp_path / "redis"
    redis = RedisServer(data)
    redis.start()
    redis.cli("EVAL", "for i = 1, 50000 do redis.call('SET', 'k' .. i, i) end", "0")
    redis.cli("SAVE")
    redis.stop()
    # Loading takes a millisecond a key, and answers LOADING between keys, until told otherwise.
    slow = RedisServer(data, port=redis.port, extra_args=SLOW_LOADING)
    nats = NatsServer(tmp_path / "nats")
    slow.start()
    nats.start()
    try:
        assert slow.cli("PING").startswith("LOADING"), "the server is not loading"
        up = Up(tmp_path, clean_env(NATS_URL=nats.url, REDIS_URL=slow.url))
        text = up.until("is loading its data", timeout=60)
        assert up.proc.poll() is None, text
        assert slow.cli("PING").startswith("LOADING")  # still loading: `up` waits
        slow.cli("CONFIG", "SET", "key-load-delay", "0")  # let it finish
        text = up.until("Ctrl-C stops everything")
        assert re.search(rf"Redis at {re.escape(slow.url)} \(REDIS_URL\) is loading its data", text), text
        assert "not reachable" not in text
        assert slow.cli("DBSIZE").strip() == "50000"
        up.proc.send_signal(signal.SIGINT)
        assert up.finish() == 0, "".join(up.lines)
    finally:
        slow.stop()
        nats.stop()


SLOW_LOADING = ("--key-load-delay", "1000", "--loading-process-events-interval-bytes", "1024")


def test_a_second_up_in_the_same_folder_refuses_and_leaves_the_first_alone(
    stack: tuple[Path, Up, str],
) -> None:
    folder, first, text = stack
    env_file = folder / ".continuity" / "env"
    shared = env_file.read_bytes()
    second = Up(folder, clean_env())
    try:
        code = second.proc.wait(30)
    except subprocess.TimeoutExpired:
        second.proc.send_signal(signal.SIGINT)  # it runs a stack of its own: stop it cleanly
        second.finish(60)
        raise AssertionError(f"a second up ran: {''.join(second.lines)}") from None
    said = second.until("\n")
    assert code == 1, said
    exports = re.search(r"export NATS_URL=(\S+) REDIS_URL=(\S+)", text)
    assert exports, text
    nats, redis = exports.groups()
    assert said.startswith(
        f"continuity up: another `continuity up` (pid {first.proc.pid}) already runs on "
        f"{folder.resolve() / '.continuity'} (NATS {nats}, Redis {redis}, console http://127.0.0.1:"
    ), said
    assert "stopping" not in said
    # The first goes on as it was: its env file untouched, its services answering.
    assert first.proc.poll() is None
    assert env_file.read_bytes() == shared
    found = cli(folder, "sessions", "get", "--tenant", "t", "--conversation", "c", "--agent", "a")
    assert found.returncode == 3, found.stderr


def _children(pid: int) -> dict[int, str]:
    """The processes whose parent is `pid`, with their names."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            name, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
            if int(fields[1]) == pid:
                found[int(stat.parent.name)] = name
    return found


def _running(pid: int) -> bool:
    """Alive, not a zombie waiting to be reaped (orphans are reaped by whoever adopts them)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2 :].split()[0] not in ("Z", "X")


def test_up_starts_again_after_a_stop_and_after_a_kill(tmp_path: Path) -> None:
    data = tmp_path / ".continuity"
    stopped = Up(tmp_path, clean_env())
    stopped.until("Ctrl-C stops everything")
    stopped.proc.send_signal(signal.SIGTERM)
    assert stopped.finish() == 0, "".join(stopped.lines)
    assert not (data / "env").exists()

    killed = Up(tmp_path, clean_env())  # the folder is free again at once
    text = killed.until("Ctrl-C stops everything")
    assert "another `continuity up`" not in text, text
    left = _children(killed.proc.pid)
    assert {"nats-server", "redis-server"} <= set(left.values()), left
    killed.proc.kill()  # no chance to stop anything or let go of the lock: the kernel does that
    killed.proc.wait()
    assert all(_running(pid) for pid in left), left  # what it started runs on, orphaned

    again = Up(tmp_path, clean_env())
    try:
        text = again.until("Ctrl-C stops everything")
        assert f"a previous `continuity up` (pid {killed.proc.pid}) did not stop" in text, text
        assert [pid for pid in left if _running(pid)] == []  # the orphans were stopped first
        # A file someone else wrote since is theirs: `up` leaves it when it stops.
        (data / "env").write_text("export NATS_URL=nats://elsewhere:4222\n")
        again.proc.send_signal(signal.SIGINT)
        assert again.finish() == 0, "".join(again.lines)
        assert (data / "env").read_text() == "export NATS_URL=nats://elsewhere:4222\n"
    finally:
        leftovers = [pid for pid in left if _running(pid)]
        if again.proc.poll() is None:
            leftovers += _children(again.proc.pid)
            again.proc.kill()
            again.proc.wait()
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
