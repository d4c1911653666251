"""The real agent harness CLIs, pinned by tests/harnesses (installed by `make harnesses`, which
`make test` runs first): each one asked offline to resume a session that does not exist, with a
home of its own (HOME, CODEX_HOME, CLAUDE_CONFIG_DIR and the XDG folders in a fresh folder) and
an environment built from nothing (no key or credential of the machine reaches it). They fail
before any model call, so no network is needed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESSES = ROOT / "tests" / "harnesses"
BIN = HARNESSES / "node_modules" / ".bin"
TIMEOUT_S = 60
"""Bound of one run (`timeout`): a CLI that waited for the network would fail the test, not hang."""


@dataclass(frozen=True)
class Cli:
    """One pinned CLI: its harness name in sdk/harnesses.json, its binary and pinned version, and
    how it is asked to resume `session_id` with a one-word prompt."""

    harness: str
    binary: str
    package: str
    version: str
    resume: tuple[str, ...]
    """The arguments, `{id}` standing for the session id."""

    def argv(self, session_id: str) -> list[str]:
        return [str(binary(self.binary)), *(a.replace("{id}", session_id) for a in self.resume)]

    def new_session_id(self) -> str:
        """A well-formed id of a session that exists nowhere."""
        if self.harness == "opencode":
            return f"ses_{uuid.uuid4().hex[:26]}"
        return str(uuid.uuid4())


CLIS: dict[str, Cli] = {
    cli.harness: cli
    for cli in (
        Cli(
            "claude-code",
            "claude",
            "@anthropic-ai/claude-code",
            "2.1.332",
            ("-p", "hi", "--resume", "{id}", "--output-format", "json"),
        ),
        Cli(
            "codex",
            "codex",
            "@openai/codex",
            "0.171.0",
            ("exec", "--skip-git-repo-check", "--json", "resume", "{id}", "hi"),
        ),
        Cli("gemini-cli", "gemini", "@google/gemini-cli", "0.61.0", ("--resume", "{id}", "-p", "hi")),
        Cli("opencode", "opencode", "opencode-ai", "1.18.33", ("run", "--session", "{id}", "hi")),
    )
}


def binary(name: str) -> Path:
    """The installed binary `name`; fails the test (never skips it) when it is missing."""
    path = BIN / name
    if not path.exists():
        pytest.fail(
            f"{path.relative_to(ROOT)} is missing: `make harnesses` installs the pinned harness CLIs "
            "(tests/harnesses/package-lock.json; `make test` runs it first)",
            pytrace=False,
        )
    return path


def offline_env(home: Path) -> dict[str, str]:
    """An environment of a fresh home under `home`, built from nothing but PATH (node and the
    system tools): the CLIs keep their state in it and find no credential."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: the harness CLIs run on node 20 or later", pytrace=False)
    env = {
        "PATH": os.pathsep.join([str(Path(node).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "LANG": "C.UTF-8",
        # Anything that would reach for the network goes to a closed local port instead.
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    for folder in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        Path(env[folder]).mkdir(parents=True, exist_ok=True)  # codex refuses a CODEX_HOME that is missing
    return env


@dataclass(frozen=True)
class Captured:
    """What one run of a CLI left: its exit code and output, as the harness adapter reads it."""

    harness: str
    argv: list[str]
    session_id: str
    cwd: Path
    env: dict[str, str]
    exit_code: int
    stdout: str
    stderr: str
    seconds: float

    def outcome(self) -> dict[str, Any]:
        """The outcome of contract's harness matcher (`continuity harness classify`'s stdin)."""
        return {"exit_code": self.exit_code, "stdout": self.stdout, "stderr": self.stderr}


def run(cli: Cli, session_id: str, cwd: Path, env: dict[str, str]) -> Captured:
    """Run `cli` resuming `session_id` in `cwd`, bounded by `timeout`."""
    argv = cli.argv(session_id)
    started = time.monotonic()
    done = subprocess.run(
        ["timeout", "-k", "5", str(TIMEOUT_S), *argv],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    return Captured(
        harness=cli.harness,
        argv=argv,
        session_id=session_id,
        cwd=cwd,
        env=env,
        exit_code=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        seconds=time.monotonic() - started,
    )


def resume_missing(cli: Cli, folder: Path) -> Captured:
    """`cli` asked to resume a session that does not exist, in a home and a workspace of its own
    under `folder`."""
    home, work = folder / "home", folder / "work"
    work.mkdir(parents=True)
    return run(cli, cli.new_session_id(), work, offline_env(home))


CODEX_OFFLINE = """model_provider = "offline"
[model_providers.offline]
name = "offline"
base_url = "http://127.0.0.1:9/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""
"""A codex model provider on a closed local port: a fresh thread starts, its turn never ends."""


@dataclass(frozen=True)
class Started:
    """A session a real CLI wrote on disk while starting a fresh turn offline."""

    harness: str
    session_id: str
    cwd: Path
    env: dict[str, str]
    files: list[Path]


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _until(proc: subprocess.Popen[str], found: Callable[[], list[Path]], what: str) -> list[Path]:
    """Wait (bounded) until `found` lists a file, then stop `proc`."""
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            files = found()
            if files:
                return files
            if proc.poll() is not None:
                break
            time.sleep(0.1)  # polling the disk for a file a child process writes, with a deadline
        raise AssertionError(f"{what}: no session file written (exit {proc.poll()})")
    finally:
        _stop(proc)


def start_session(cli: Cli, folder: Path) -> Started:
    """`cli` starting a fresh session offline until it has written the session's file: claude
    writes it and stops (not logged in); codex and gemini write it before the model call, and are
    stopped then. Only the CLIs that do so offline: claude-code, codex, gemini-cli."""
    home, work = folder / "home", folder / "work"
    work.mkdir(parents=True)
    env = offline_env(home)
    if cli.harness == "claude-code":
        session_id = str(uuid.uuid4())
        argv = [str(binary("claude")), "-p", "hi", "--session-id", session_id, "--output-format", "json"]
        done = subprocess.run(
            ["timeout", str(TIMEOUT_S), *argv], cwd=work, env=env, capture_output=True, text=True, check=False
        )
        assert json.loads(done.stdout)["session_id"] == session_id, done.stdout + done.stderr
        files = sorted((home / ".claude" / "projects").glob(f"*/{session_id}.jsonl"))
        assert files, done.stdout + done.stderr
        return Started(cli.harness, session_id, work, env, files)
    if cli.harness == "codex":
        (home / ".codex" / "config.toml").write_text(CODEX_OFFLINE)
        proc = subprocess.Popen(
            [str(binary("codex")), "exec", "--skip-git-repo-check", "--json", "hi"],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        killer = threading.Timer(TIMEOUT_S, proc.kill)
        killer.start()
        try:
            assert proc.stdout is not None
            first = json.loads(proc.stdout.readline() or "{}")
        finally:
            killer.cancel()
        assert first.get("type") == "thread.started", first
        thread = str(first["thread_id"])
        rollouts = home / ".codex" / "sessions"
        files = _until(proc, lambda: sorted(rollouts.glob(f"*/*/*/rollout-*-{thread}.jsonl")), "codex")
        return Started(cli.harness, thread, work, env, files)
    if cli.harness == "gemini-cli":
        session_id = str(uuid.uuid4())
        env = {**env, "GEMINI_API_KEY": "offline", "GEMINI_CLI_TRUST_WORKSPACE": "true"}
        proc = subprocess.Popen(
            [str(binary("gemini")), "--session-id", session_id, "-p", "hi"],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        chats = home / ".gemini" / "tmp"
        # Gemini CLI names the file by the id's first eight characters, under the project's folder.
        named = f"*/chats/session-*-{session_id[:8]}.json*"
        files = _until(proc, lambda: sorted(chats.glob(named)), "gemini")
        assert json.loads(files[0].read_text().splitlines()[0])["sessionId"] == session_id
        return Started(cli.harness, session_id, work, env, files)
    raise ValueError(f"{cli.harness} writes no session file offline")
