"""`continuity sessions get|decide|commit` driven as a person or a script would."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from services import registry
from shared.platform.config import Config
from tests.support import RunningApp, running

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def store_app(config: Config) -> AsyncIterator[RunningApp]:
    async with running(registry.load("session-store"), config) as app:
        yield app


async def cli(config: Config, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "continuity", "sessions", *args, "--nats-url", config.nats_url]
    return await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)


SESSION = ["--tenant", "acme", "--conversation", "cli-conv", "--agent", "codex"]
RECORD = ["--adapter", "deepseek-harness", "--model", "dsh-pro", "--cwd", "/w/acme"]


async def test_commit_decide_get_round_trip(store_app: RunningApp, config: Config) -> None:
    commit = await cli(
        config,
        "commit",
        *SESSION,
        *RECORD,
        "--native-session-id",
        "ns-1",
        "--cursor",
        "c-1",
        "--generation",
        "gen-secret",
        "--json",
    )
    assert commit.returncode == 0, commit.stderr
    assert json.loads(commit.stdout)["revision"] >= 1
    decide = await cli(
        config,
        "decide",
        *SESSION,
        *RECORD,
        "--latest-cursor",
        "c-1",
        "--compatibility",
        "profile-ready",
        "--ready-generation",
        "gen-secret",
        "--json",
    )
    assert json.loads(decide.stdout)["mode"] == "resume"
    get = await cli(config, "get", *SESSION)
    assert get.returncode == 0 and "generation_trusted" in get.stdout and "gen-secret" not in get.stdout


async def test_error_codes_become_exit_codes(store_app: RunningApp, config: Config) -> None:
    missing = await cli(config, "get", "--tenant", "acme", "--conversation", "nobody", "--agent", "x")
    assert missing.returncode == 3 and "not_found" in missing.stderr
    await cli(config, "commit", *SESSION, *RECORD, "--native-session-id", "ns-2", "--cursor", "c-2")
    conflict = await cli(
        config,
        "commit",
        *SESSION,
        *RECORD,
        "--native-session-id",
        "ns-3",
        "--expected-revision",
        "999",
        "--json",
    )
    assert conflict.returncode == 1 and json.loads(conflict.stdout)["error"]["code"] == "revision_conflict"
    bad = await cli(config, "get", "--tenant", "bad tenant", "--conversation", "c", "--agent", "a")
    assert bad.returncode == 2


async def test_no_service_is_unavailable(config: Config) -> None:
    result = await cli(config, "get", *SESSION, "--timeout", "1")
    assert result.returncode == 4
