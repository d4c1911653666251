"""`continuity up` on a host other users share, run for real with its embedded servers: every
file and folder it (and every process it starts) wrote under its data folder is its owner's
alone; NATS and Redis refuse a local connection that has no password, and their command lines
(which every local user can read) carry none; everything listens on 127.0.0.1 only; and the
`continuity` commands of the same user still work, reading the passwords from `.continuity/env`.

The reproduction was another local user subscribing to `>` on up's NATS and running
`CONFIG SET appendfsync` on its Redis, reading its logs and Redis files (0644), and the
services' metrics listening on 0.0.0.0 while `up` printed 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from continuity.cli.envfile import read_env_file
from tests.support import read_until

CLI = str(Path(sys.executable).parent / "continuity")
CLEAN = ("NATS_URL", "REDIS_URL", "CONTINUITY_RUNNER_KEYS", "CONTINUITY_CONSOLE_DEV_TOKEN")


class Up:
    def __init__(self, folder: Path, proc: subprocess.Popen[str], text: str) -> None:
        self.folder = folder
        self.proc = proc
        self.text = text

    @property
    def data(self) -> Path:
        return self.folder / ".continuity"

    def port(self, pattern: str) -> int:
        found = re.search(pattern, self.text, re.M)
        assert found, self.text
        return int(found.group(1))


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    folder = tmp_path_factory.mktemp("shared-host")
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    proc = subprocess.Popen(
        [CLI, "up"], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        text = read_until(proc, "Ctrl-C stops everything", 90)
        assert "Ctrl-C stops everything" in text, text
        yield Up(folder, proc, text)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_commands_of_the_same_user_read_the_passwords_and_work(up: Up) -> None:
    shared = read_env_file(up.data / "env")
    assert re.fullmatch(r"nats://continuity:[0-9a-f]{48}@127\.0\.0\.1:\d+", shared["NATS_URL"])
    assert re.fullmatch(r"redis://:[0-9a-f]{48}@127\.0\.0\.1:\d+/0", shared["REDIS_URL"])
    # Never on the terminal.
    for url in (shared["NATS_URL"], shared["REDIS_URL"]):
        password = url.split("@")[0].rsplit(":", 1)[1]
        assert password not in up.text
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    done = subprocess.run(
        [CLI, "simulate", "--events", "10", "--seed", "5", "--archive-timeout-rate", "0", "--json", "-q"],
        cwd=up.folder, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(done.stdout)["contradictions"] == []
    listed = subprocess.run(
        [CLI, "runs", "list", "--json"], cwd=up.folder, env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["items"]


async def raw(port: int, payload: bytes, until: bytes) -> bytes:
    """What the server answers to `payload` on a fresh connection, up to `until`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        seen = b""
        while until not in seen:
            chunk = await asyncio.wait_for(reader.read(4096), 5)
            if not chunk:
                break
            seen += chunk
        return seen
    finally:
        writer.close()


async def test_nats_refuses_a_local_connection_without_the_password(up: Up) -> None:
    port = up.port(r"^NATS\s+nats://127\.0\.0\.1:(\d+)\s+\(embedded\)")
    # The reproduction: subscribe to everything, as any local user could.
    answer = await raw(
        port, b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB > 1\r\nPING\r\n', b"\r\n-ERR"
    )
    assert b"Authorization Violation" in answer, answer
    guessed = await raw(
        port, b'CONNECT {"user":"continuity","pass":"a-guess"}\r\nSUB > 1\r\nPING\r\n', b"\r\n-ERR"
    )
    assert b"Authorization Violation" in guessed and b"PONG" not in guessed, guessed


async def test_redis_refuses_a_local_connection_without_the_password(up: Up) -> None:
    port = up.port(r"^Redis\s+redis://127\.0\.0\.1:(\d+)/0\s+\(embedded\)")
    # The reproduction: weaken its durability, as any local user could.
    answer = await raw(
        port, b"*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n$11\r\nappendfsync\r\n$2\r\nno\r\n", b"\r\n"
    )
    assert answer.startswith(b"-NOAUTH"), answer
    for command in (b"*1\r\n$4\r\nPING\r\n", b"*2\r\n$4\r\nKEYS\r\n$1\r\n*\r\n"):
        assert (await raw(port, command, b"\r\n")).startswith(b"-NOAUTH")
    guessed = await raw(port, b"*2\r\n$4\r\nAUTH\r\n$7\r\na-guess\r\n", b"\r\n")
    assert guessed.startswith(b"-WRONGPASS"), guessed
    # Protected mode is on as well.
    shared = read_env_file(up.data / "env")
    password = shared["REDIS_URL"].split("@")[0].rsplit(":", 1)[1]
    auth = f"*2\r\n$4\r\nAUTH\r\n${len(password)}\r\n{password}\r\n".encode()
    reply = await raw(
        port, auth + b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$14\r\nprotected-mode\r\n", b"yes\r\n"
    )
    assert reply.startswith(b"+OK") and b"protected-mode" in reply and reply.endswith(b"yes\r\n"), reply


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(entry.parent.name))
    return found


def test_no_password_is_on_a_command_line_or_in_a_world_readable_place(up: Up) -> None:
    shared = read_env_file(up.data / "env")
    passwords = [url.split("@")[0].rsplit(":", 1)[1] for url in (shared["NATS_URL"], shared["REDIS_URL"])]
    processes = _children(up.proc.pid)
    assert len(processes) >= 7, processes  # two servers and five services
    for pid in processes:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert not any(p in command_line for p in passwords), command_line


def test_every_file_under_the_data_folder_is_its_owners_alone(up: Up) -> None:
    """After a fleet has written through every service (the first test): logs, the env file,
    the console's token, up's record, the servers' configuration, JetStream's store, Redis's
    append-only files."""
    seen = {"folders": 0, "files": 0}
    open_to_others = []
    for root, folders, files in os.walk(up.data):
        for name in [*folders, *files]:
            path = Path(root) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                continue
            seen["folders" if stat.S_ISDIR(mode) else "files"] += 1
            if mode & 0o077:
                open_to_others.append(f"{oct(mode & 0o777)} {path.relative_to(up.data)}")
    assert stat.S_IMODE(up.data.stat().st_mode) == 0o700
    assert open_to_others == []
    names = {p.name for p in up.data.rglob("*")}
    assert {"env", "console-token", "classifier.log", "up.json", "nats.conf", "redis.conf"} <= names
    assert any(p.suffix == ".aof" or "appendonly" in p.name for p in up.data.rglob("*")), names
    assert any(p.name.endswith(".blk") or p.name == "meta.inf" for p in up.data.rglob("*")), names
    assert seen["files"] > 20 and seen["folders"] > 5, seen


def _listening() -> dict[int, set[str]]:
    """Port -> the addresses a socket listens on, from /proc/net/tcp and tcp6."""
    found: dict[int, set[str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            address, port = fields[1].split(":")
            found.setdefault(int(port, 16), set()).add(address)
    return found


def test_everything_up_started_listens_on_the_loopback_only(up: Up) -> None:
    ports = [int(p) for p in re.findall(r"http://127\.0\.0\.1:(\d+)/metrics", up.text)]
    ports += [up.port(r"^NATS\s+nats://127\.0\.0\.1:(\d+)"), up.port(r"^Redis\s+redis://127\.0\.0\.1:(\d+)")]
    ports += [up.port(r"^console\s+http://127\.0\.0\.1:(\d+)/")]
    assert len(ports) == 8, up.text  # five services' metrics, NATS, Redis, the console
    listening = _listening()
    loopback = {"0100007F"}  # 127.0.0.1, as the kernel writes it
    for port in ports:
        assert listening.get(port) == loopback, (port, listening.get(port))
