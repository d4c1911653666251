"""The presence probe: on the layouts the real CLIs write (claude, codex and gemini each start a
session offline in a fresh home before failing on the network, and the probe finds it where it
is), on the layouts documented for the others, and its guarantees: it never opens a file (an audit
hook sees no open; a FIFO named like a session neither blocks it nor counts), a hostile session id
is `absent` without any file system call, and a filled-in value never climbs out of the root."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from continuity_runner import harness
from continuity_runner.harness import probe as probe_module

from tests.support.harness_clis import BIN, offline_env

UUID_TAIL = "-1f0a-4c4e-9a43-5c1d2e3f4a5b"
"""A UUID after its first 8 characters."""


def cli(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is not installed: `make harnesses` installs the pinned CLIs (tests/harnesses)")
    return path


def started(argv: list[str], cwd: Path, env: dict[str, str], marker: str) -> list[str]:
    """Run `argv` until a line of its stdout holds `marker` (the session is written by then),
    then stop it; the lines read. It fails when the process ends without the marker."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    timer = threading.Timer(60, os.killpg, (proc.pid, signal.SIGKILL))  # a bound, not a wait
    timer.start()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if marker in line:
                return lines
        raise AssertionError(f"{argv[0]} ended without {marker!r}: {lines}")
    finally:
        timer.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**offline_env(tmp_path / "home"), **extra}


# ---- the layouts the real binaries write --------------------------------------------------------


def claude_session(tmp_path: Path, cwd: Path, env: dict[str, str]) -> str:
    """claude -p in `cwd`: it writes its session, then fails (not logged in). Its session id."""
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(cli("claude")), "-p", "hi", "--output-format", "json"],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    result = json.loads(done.stdout)
    assert result["is_error"] is True, done.stdout  # offline: it never answered
    return str(result["session_id"])


@pytest.mark.parametrize(
    "folder",
    [
        "work",
        "my.project_x y-é",  # every character but A-Z a-z 0-9 is a `-`, é too
        "emoji-🙂",  # two UTF-16 units: two `-`
        f"{'a' * 120}/{'b' * 120}",  # longer than 200: cut, and the path's hash after it
    ],
)
def test_claude_code_sessions_are_where_the_real_claude_writes_them(tmp_path: Path, folder: str) -> None:
    cli("claude")  # fails, naming `make harnesses`, when the CLI is not installed
    env = env_for(tmp_path)
    cwd = tmp_path / folder
    session_id = claude_session(tmp_path, cwd, env)
    root = Path(env["CLAUDE_CONFIG_DIR"])
    [written] = list((root / "projects").glob(f"*/{session_id}.jsonl"))
    assert written.parent.name == harness.claude_key(str(cwd), env)  # the scheme is the binary's
    claude = harness.adapter("claude-code")
    assert claude.probe(session_id, cwd=str(cwd), env=env) == "present"
    assert claude.probe(str(uuid.uuid4()), cwd=str(cwd), env=env) == "absent"
    assert claude.probe(session_id, cwd=None, env=env) == "unknown"  # keyed by the cwd: not given
    # The Agent SDK runs the same CLI: the same files.
    assert harness.adapter("claude-agent-sdk").probe(session_id, cwd=str(cwd), env=env) == "present"


def test_claude_code_finds_a_session_from_another_working_directory_and_so_does_the_probe(
    tmp_path: Path,
) -> None:
    cli("claude")  # fails, naming `make harnesses`, when the CLI is not installed
    env = env_for(tmp_path)
    session_id = claude_session(tmp_path, tmp_path / "first", env)
    other = tmp_path / "second"
    other.mkdir()
    done = subprocess.run(
        [str(cli("claude")), "-p", "hi", "--resume", session_id, "--output-format", "json"],
        cwd=other,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # It resumed the session (and failed only for want of a login), not "No conversation found".
    assert "No conversation found" not in done.stderr + done.stdout
    assert json.loads(done.stdout)["session_id"] == session_id
    assert harness.adapter("claude-code").probe(session_id, cwd=str(other), env=env) == "present"


def test_claude_code_names_the_project_folder_after_claude_code_project_dir_name(tmp_path: Path) -> None:
    cli("claude")  # fails, naming `make harnesses`, when the CLI is not installed
    env = env_for(tmp_path, CLAUDE_CODE_PROJECT_DIR_NAME="my-project")
    session_id = claude_session(tmp_path, tmp_path / "work", env)
    assert (Path(env["CLAUDE_CONFIG_DIR"]) / "projects" / "my-project" / f"{session_id}.jsonl").is_file()
    assert harness.claude_key(str(tmp_path / "work"), env) == "my-project"
    assert (
        harness.claude_key(str(tmp_path / "work"), {**env, "CLAUDE_CODE_PROJECT_DIR_NAME": "../x"}) != "../x"
    )
    no_config = {k: v for k, v in env.items() if k != "CLAUDE_CONFIG_DIR"}
    assert harness.claude_key("/w", no_config) == "-w"  # the name counts only with CLAUDE_CONFIG_DIR


def test_codex_rollouts_are_where_the_real_codex_writes_them(tmp_path: Path) -> None:
    cli("codex")  # fails, naming `make harnesses`, when the CLI is not installed
    env = env_for(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    lines = started(
        [str(cli("codex")), "exec", "--skip-git-repo-check", "--json", "hi"], work, env, '"turn.started"'
    )
    thread_id = json.loads(lines[0])["thread_id"]
    codex_home = Path(env["CODEX_HOME"])
    [rollout] = list((codex_home / "sessions").glob(f"*/*/*/rollout-*-{thread_id}.jsonl"))
    codex = harness.adapter("codex")
    assert codex.probe(thread_id, cwd=None, env=env) == "present"  # not keyed by the cwd
    assert harness.adapter("codex-app-server").probe(thread_id, env=env) == "present"
    assert codex.probe(str(uuid.uuid4()), env=env) == "absent"
    # The state database stays; the rollout alone decides (codex then says `no rollout found`).
    (codex_home / "archived_sessions").mkdir()
    archived = codex_home / "archived_sessions" / rollout.name
    rollout.rename(archived)
    assert codex.probe(thread_id, env=env) == "present"  # archived: codex unarchive restores it
    archived.unlink()
    assert (codex_home / "state_5.sqlite").is_file()
    assert codex.probe(thread_id, env=env) == "absent"


def test_gemini_sessions_are_where_the_real_gemini_writes_them(tmp_path: Path) -> None:
    cli("gemini")  # fails, naming `make harnesses`, when the CLI is not installed
    env = env_for(tmp_path, GEMINI_API_KEY="not-a-key")
    work = tmp_path / "work"
    work.mkdir()
    lines = started(
        [str(cli("gemini")), "--skip-trust", "-p", "hi", "-o", "stream-json"], work, env, '"type":"init"'
    )
    session_id = json.loads(lines[-1])["session_id"]
    [chat] = list(Path(env["HOME"]).glob(".gemini/tmp/*/chats/session-*.jsonl"))
    assert chat.name.endswith(f"-{session_id[:8]}.jsonl")
    gemini = harness.adapter("gemini-cli")
    assert gemini.probe(session_id, cwd=str(work), env=env) == "present"
    assert gemini.probe(str(uuid.uuid4()), env=env) == "absent"
    # The file name holds the first 8 characters only: one sharing them counts (a report, never a
    # wrong rejection).
    assert gemini.probe(session_id[:8] + UUID_TAIL, env=env) == "present"


# ---- the layouts documented for the others ------------------------------------------------------


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}\n")
    return path


def test_gemini_legacy_layouts_count_too(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    sid = "0b5e0c9e" + UUID_TAIL
    gemini = harness.adapter("gemini-cli")
    assert gemini.probe(sid, env=env) == "absent"
    # Before 0.61: the project folder was the sha256 of the path, the file .json.
    touch(tmp_path / ".gemini" / "tmp" / ("a" * 64) / "chats" / "session-2025-08-01T10-00-0b5e0c9e.json")
    assert gemini.probe(sid, env=env) == "present"
    assert gemini.probe("abc", env={"GEMINI_CLI_HOME": str(tmp_path / "g")}) == "absent"
    touch(tmp_path / "g" / ".gemini" / "tmp" / "proj" / "chats" / "session-2026-01-01T00-00-abc.jsonl")
    assert gemini.probe("abc", env={"GEMINI_CLI_HOME": str(tmp_path / "g")}) == "present"  # short ids whole


def test_harnesses_without_files_on_this_host_are_unknown(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    for name, session_id in [
        ("opencode", "ses_" + "a1B2c3D4e5" * 2 + "abcdef"),
        ("openai-agents", "conv_1234"),
        ("acp", str(uuid.uuid4())),
    ]:
        assert harness.adapter(name).spec.sessions is None
        assert harness.adapter(name).probe(session_id, cwd=str(tmp_path), env=env) == "unknown"
    # An id that is not one of the harness's is absent even so: it names no session.
    assert harness.adapter("opencode").probe("ses_abc", env=env) == "absent"


def test_where_the_root_cannot_be_known_or_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    claude, codex = harness.adapter("claude-code"), harness.adapter("codex")
    sid, cwd = str(uuid.uuid4()), "/work/app"
    assert claude.probe(sid, cwd=cwd, env={}) == "unknown"  # no HOME for ~
    assert claude.probe(sid, cwd=cwd, env={"HOME": "relative/home"}) == "unknown"
    assert claude.probe(sid, cwd=cwd, env={"CLAUDE_CONFIG_DIR": "relative"}) == "unknown"
    assert claude.probe(sid, cwd="work/app", env={"HOME": str(tmp_path)}) == "unknown"  # a relative cwd
    assert claude.probe(sid, cwd=cwd, env={"HOME": str(tmp_path)}) == "absent"  # no ~/.claude at all
    assert codex.probe(sid, env={"CODEX_HOME": "", "HOME": str(tmp_path)}) == "absent"  # empty: default
    (tmp_path / "file").write_text("")
    assert codex.probe(sid, env={"CODEX_HOME": str(tmp_path / "file")}) == "absent"  # not a folder
    touch(tmp_path / "codex" / "sessions" / "2026" / "01" / "02" / f"rollout-2026-01-02T00-00-00-{sid}.jsonl")
    env = {"CODEX_HOME": str(tmp_path / "codex")}
    assert codex.probe(sid, env=env) == "present"

    real_scandir = os.scandir

    def refused(path: Any) -> Any:
        if str(path).endswith("/01"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refused)
    assert codex.probe(sid, env=env) == "unknown"  # a folder it may not read: it cannot tell
    assert codex.probe(str(uuid.uuid4()), env=env) == "unknown"
    monkeypatch.undo()

    real_stat = os.stat

    def root_refused(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path) == str(tmp_path / "codex"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", root_refused)
    assert codex.probe(sid, env=env) == "unknown"


def test_only_a_regular_file_counts_and_links_are_followed(tmp_path: Path) -> None:
    env = {"CODEX_HOME": str(tmp_path)}
    codex = harness.adapter("codex")
    day = tmp_path / "sessions" / "2026" / "01" / "02"
    sid = [str(uuid.uuid4()) for _ in range(4)]
    (day / f"rollout-x-{sid[0]}.jsonl").mkdir(parents=True)  # a folder named like a session
    (day / f"rollout-x-{sid[1]}.jsonl").symlink_to(tmp_path / "nowhere")  # a dangling link
    target = touch(tmp_path / "elsewhere.jsonl")
    (day / f"rollout-x-{sid[2]}.jsonl").symlink_to(target)
    locked = touch(day / f"rollout-x-{sid[3]}.jsonl")
    locked.chmod(0)  # no read permission: existence is all the probe asks
    assert [codex.probe(s, env=env) for s in sid] == ["absent", "absent", "present", "present"]


# ---- it never opens a file -----------------------------------------------------------------------

_AUDIT: dict[str, Any] = {"on": False, "events": []}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _AUDIT["on"] and event in ("open", "os.scandir", "os.listdir", "os.chdir"):
        _AUDIT["events"].append((event, args[0] if args else None))


sys.addaudithook(_audit)  # a hook cannot be removed: it records only while a test turns it on


@pytest.fixture
def audited() -> Iterator[list[tuple[str, Any]]]:
    _AUDIT["events"] = []
    _AUDIT["on"] = True
    yield _AUDIT["events"]
    _AUDIT["on"] = False


def test_the_probe_never_opens_a_file(tmp_path: Path, audited: list[tuple[str, Any]]) -> None:
    cwd = "/work/app"
    home = {"HOME": str(tmp_path)}
    sid = str(uuid.uuid4())
    key = harness.claude_key(cwd, home)
    touch(tmp_path / ".claude" / "projects" / key / f"{sid}.jsonl")
    touch(tmp_path / ".claude" / "projects" / "other" / "x.jsonl")
    gemini_id = "0b5e0c9e" + UUID_TAIL
    touch(tmp_path / ".gemini" / "tmp" / "p" / "chats" / "session-2026-01-01T00-00-0b5e0c9e.jsonl")
    _AUDIT["events"].clear()
    assert harness.adapter("claude-code").probe(sid, cwd=cwd, env=home) == "present"
    assert harness.adapter("claude-code").probe(str(uuid.uuid4()), cwd=cwd, env=home) == "absent"
    assert harness.adapter("gemini-cli").probe(gemini_id, env=home) == "present"
    assert harness.adapter("codex").probe(sid, env=home) == "absent"
    opened = [e for e in audited if e[0] == "open"]
    assert opened == []
    assert any(e[0] == "os.scandir" for e in audited)  # the hook sees the probe's calls


def test_a_fifo_named_like_a_session_neither_blocks_the_probe_nor_counts(tmp_path: Path) -> None:
    sid = str(uuid.uuid4())
    folder = tmp_path / ".claude" / "projects" / "-work-app"
    folder.mkdir(parents=True)
    os.mkfifo(folder / f"{sid}.jsonl")  # opening it for reading would block until a writer came
    answer: list[str] = []
    worker = threading.Thread(
        target=lambda: answer.append(
            harness.adapter("claude-code").probe(sid, cwd="/work/app", env={"HOME": str(tmp_path)})
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the probe blocked on a FIFO"
    assert answer == ["absent"]


HOSTILE = ["../../etc/passwd", "/etc/passwd", "..", ".", "a/b", "x\x00y", "", "*", "0b5e0c9e-*"]


@pytest.mark.parametrize("name", harness.names())
def test_a_hostile_session_id_is_absent_without_any_file_system_call(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the file system was asked: {args}")

    # The probe's own `os`: every call that reaches the file system fails the test.
    fake = types.SimpleNamespace(path=os.path, environ=os.environ, stat=forbidden, scandir=forbidden)
    monkeypatch.setattr(probe_module, "os", fake)
    adapter = harness.adapter(name)
    for session_id in HOSTILE:
        said = adapter.probe(session_id, cwd="/work/app", env={"HOME": str(tmp_path)})
        if adapter.spec.sessions is None:
            # An SDK's or a protocol's id may be any contract token (`..` too): it is never a path.
            assert said == ("unknown" if adapter.is_session_id(session_id) else "absent")
        else:
            assert not adapter.is_session_id(session_id) and said == "absent", session_id
    # The check is not vacuous: a well-formed id of a harness that keeps files does ask.
    if adapter.spec.sessions is not None:
        good = "0b5e0c9e" + UUID_TAIL
        with pytest.raises(AssertionError, match="the file system was asked"):
            adapter.probe(good, cwd="/work/app", env={"HOME": str(tmp_path)})


def test_a_filled_in_value_never_makes_a_path_out_of_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth: a table whose id pattern let `..` or `/` through still never builds a path
    with them (the shipped patterns never do)."""
    root = tmp_path / "root"
    touch(tmp_path / "secret.jsonl")
    touch(root / "ok" / "x.jsonl")
    spec = harness.Sessions(
        root=harness.table.Root(env=None, default=str(root)),
        paths=["{session_id}.jsonl", "ok/{session_id}.jsonl", "*/{session_id}.jsonl"],
        cwd_key=None,
        keyed_by=["session_id"],
        notes="",
    )
    asked: list[str] = []
    real_stat = os.stat

    def recording(path: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", recording)
    permissive = __import__("re").compile(r"[./a-z]+")
    for session_id in ("../secret", "..", "ok/../../secret"):
        assert probe_module.probe_sessions(spec, permissive, session_id, env={}) == "absent"
    assert probe_module.probe_sessions(spec, permissive, "x", env={}) == "present"
    monkeypatch.undo()
    assert asked and all(Path(p).resolve().is_relative_to(root.resolve()) for p in asked), asked


def test_the_probe_copes_with_a_deep_and_wide_sessions_folder(tmp_path: Path) -> None:
    codex = harness.adapter("codex")
    sid = str(uuid.uuid4())
    for day in range(1, 29):
        folder = tmp_path / "sessions" / "2026" / "02" / f"{day:02d}"
        folder.mkdir(parents=True)
        for n in range(20):
            (folder / f"rollout-2026-02-{day:02d}T00-00-{n:02d}-{uuid.uuid4()}.jsonl").write_text("")
    touch(tmp_path / "sessions" / "2026" / "02" / "28" / f"rollout-2026-02-28T23-59-59-{sid}.jsonl")
    assert codex.probe(sid, env={"CODEX_HOME": str(tmp_path)}) == "present"
    shutil.rmtree(tmp_path / "sessions" / "2026" / "02" / "28")
    assert codex.probe(sid, env={"CODEX_HOME": str(tmp_path)}) == "absent"
