"""`continuity up`: run every service against NATS and Redis, printing where things listen.

It works from any folder, fails within seconds naming an unreachable server or a bad variable,
and once ready shares the addresses (and the runner keys it made) in `<data-dir>/env` for the
other commands, which read `.continuity/env` when a variable is not set.

On a host other users share: the embedded NATS and Redis listen on 127.0.0.1 and take a user
and password (NATS) and a password (Redis) made at each start, which only the URLs in the env
file carry; everything `up` and the processes it starts write is its owner's alone (umask 077:
the data folder 0700, its files 0600, the servers' data included); the services' metrics listen
on 127.0.0.1."""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from continuity.cli.connect import redacted_url
from continuity.cli.envfile import write_env_file
from continuity.cli.examples import examples
from continuity.cli.exits import EXIT_BAD_INPUT, EXIT_CONFLICT
from continuity.devstack.servers import free_port
from continuity.devstack.stack import Stack, StartError
from continuity.devstack.uplock import Busy, UpLock, busy_message, digest, stop_leftovers
from services import registry

DEV_KEY_IDS = ("dev-k1", "dev-k2")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = sub.add_parser(
        "up",
        help="run Continuity locally (embedded NATS and Redis unless "
        "NATS_URL / REDIS_URL are set) until Ctrl-C",
        description="Starts the four services and the console (and embedded NATS and Redis unless NATS_URL / "
        "REDIS_URL are set), prints the addresses and writes them to <data-dir>/env, which the "
        "other commands read from .continuity/env when NATS_URL / REDIS_URL / "
        "CONTINUITY_RUNNER_KEYS are unset. Without CONTINUITY_RUNNER_KEYS it makes development "
        "runner keys, so that `continuity simulate` works against it as it is.",
    )
    up.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".continuity"),
        help="where the env file, the services' logs and embedded servers' data go (default: .continuity)",
    )
    up.add_argument(
        "--demo", action="store_true", help="also run a simulated runner fleet and operator against the stack"
    )
    up.add_argument(
        "--demo-seconds",
        type=float,
        default=20.0,
        help="with --demo: how long the fleet runs before its report (default 20)",
    )
    up.set_defaults(func=run)
    examples(
        up,
        "continuity up                      # embedded NATS and Redis on free ports",
        "continuity up --demo               # and a simulated fleet, with a report",
        "NATS_URL=nats://127.0.0.1:4222 REDIS_URL=redis://127.0.0.1:6379/0 continuity up",
    )


def development_keys() -> str:
    """Fresh runner keys for a local stack (CONTINUITY_RUNNER_KEYS syntax)."""
    from continuity.tools.simulate.keys import keys_env

    return keys_env({key_id: secrets.token_bytes(32) for key_id in DEV_KEY_IDS})


def service_extra(args: argparse.Namespace) -> dict[str, str]:
    """What the services get on top of this process's environment."""
    if args.demo:
        from continuity.tools.simulate import demo_environment

        return demo_environment()
    return {"CONTINUITY_RUNNER_KEYS": os.environ.get("CONTINUITY_RUNNER_KEYS") or development_keys()}


def check_configuration(extra: dict[str, str]) -> None:
    """The services' own check of their variables, run here first so its message reaches the
    terminal instead of a service's log."""
    from shared.platform.config import Config, ConfigError

    env = {**os.environ, "CONTINUITY_METRICS_PORT": "0", **extra}
    try:
        Config.from_env(env)
    except ConfigError as err:
        raise StartError(f"configuration error: {err}", EXIT_BAD_INPUT) from None


def stop_handler(stop: threading.Event) -> Callable[[int, FrameType | None], None]:
    """A signal handler that sets `stop`, from a thread of its own: the handler runs in the main
    thread between two bytecodes, possibly while that thread holds `stop`'s own lock (inside
    `stop.wait`, which the main thread loops on), and `Event.set` waiting for that lock there
    would hang `up` for good."""

    def handler(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=stop.set, name="stop", daemon=True).start()

    return handler


def run(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop_handler(stop))
    # What this process and its children (servers, services) create is their owner's alone.
    os.umask(0o077)
    data_dir = args.data_dir.resolve()
    lock = UpLock(data_dir)
    try:
        previous = lock.acquire()  # before anything in the folder is touched
        private(data_dir)
    except Busy as busy:
        print(f"continuity up: {busy_message(data_dir, busy.record)}", file=sys.stderr, flush=True)
        return EXIT_CONFLICT
    except OSError as err:
        print(f"continuity up: cannot use {data_dir} ({err.strerror})", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    try:
        if previous is not None:
            stop_leftovers(previous, _say)
            env_file = data_dir / "env"
            if previous.env_digest and digest(env_file) == previous.env_digest:
                env_file.unlink(missing_ok=True)  # its addresses died with that stack
        return _run(args, Stack(data_dir=data_dir), lock, stop)
    finally:
        lock.release()


def _run(args: argparse.Namespace, stack: Stack, lock: UpLock, stop: threading.Event) -> int:
    env_file = stack.data_dir / "env"
    code = 0
    try:
        extra = service_extra(args)
        check_configuration(extra)
        started = time.monotonic()
        _say(_first_line(stack.data_dir))  # at once: the servers and services take seconds
        console = _start(stack, lock, extra)
        if not stack.wait_ready(stop=stop):
            print("continuity up: stopped while starting", file=sys.stderr, flush=True)
            return 130
        shared = {
            "NATS_URL": stack.nats_url,
            "REDIS_URL": stack.redis_url,
            "CONTINUITY_RUNNER_KEYS": extra["CONTINUITY_RUNNER_KEYS"],
        }
        write_env_file(env_file, shared)
        console_url = f"http://127.0.0.1:{console['CONTINUITY_CONSOLE_PORT']}/" if console else ""
        lock.record.nats_url = redacted_url(stack.nats_url)
        lock.record.redis_url = redacted_url(stack.redis_url)
        lock.record.console_url = console_url
        lock.record.env_digest = digest(env_file)
        lock.save()
        _say(f"ready in {time.monotonic() - started:.1f}s\n")
        _print_endpoints(stack, env_file)
        if console:
            print(
                f"console    {console_url}  sign-in token in {_shown(stack.data_dir / CONSOLE_TOKEN_FILE)}",
                flush=True,
            )
        code = _until_stopped(args, stack, stop)
    except StartError as err:
        print(f"continuity up: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    except RuntimeError as err:  # a service exited or was never ready; it said why
        print(f"continuity up: {err}", file=sys.stderr, flush=True)
        return 1
    finally:
        if stack.services or stack.nats or stack.redis:
            print("stopping...", flush=True)
        stack.stop()
        # Its addresses die with the stack; a file someone changed since is theirs.
        if lock.record.env_digest and digest(env_file) == lock.record.env_digest:
            env_file.unlink(missing_ok=True)
    return code


def _start(stack: Stack, lock: UpLock, extra: dict[str, str]) -> dict[str, str]:
    """The servers, then every service, each recorded in the lock as it starts; the console's
    environment ({} without a console)."""
    stack.start_servers(secured=True)
    for server in (stack.nats, stack.redis):
        if server is not None and server.proc is not None:
            lock.started(server.name, server.proc.pid)
    stack.check_servers(say=_say)
    names = registry.available()
    _say(f"starting the services: {', '.join(names)} ...")
    console: dict[str, str] = {}
    for name in names:
        log = stack.data_dir / f"{name}.log"
        env = dict(extra)
        if name == "console":
            console = console_env(stack.data_dir)
            env.update(console)
        lock.started(name, stack.start_service(name, env, log_path=log).proc.pid)
    return console


def _until_stopped(args: argparse.Namespace, stack: Stack, stop: threading.Event) -> int:
    """The demo, or a wait for Ctrl-C or for a service to exit (then 1)."""
    if args.demo:
        from continuity.tools.simulate import run_demo

        return run_demo(stack, seconds=args.demo_seconds, stop=stop)
    print("Ctrl-C stops everything.", flush=True)
    code = 0
    while not stop.wait(0.5):
        for service in stack.services:
            if service.proc.poll() is not None:
                print(f"{service.name} exited with code {service.proc.returncode}", file=sys.stderr)
                stop.set()
                code = 1
    return code


def _first_line(data_dir: Path) -> str:
    """What `up` is about to do, said before the seconds it takes."""
    embedded = [
        name
        for name, variable in (("NATS", "NATS_URL"), ("Redis", "REDIS_URL"))
        if not os.environ.get(variable)
    ]
    given = [
        f"{name} at {redacted_url(os.environ[variable])}"
        for name, variable in (("NATS", "NATS_URL"), ("Redis", "REDIS_URL"))
        if os.environ.get(variable)
    ]
    if not embedded:
        return f"checking {' and '.join(given)} ..."
    line = f"starting {' and '.join(embedded)} under {_shown(data_dir)}/"
    return f"{line} (with {given[0]}) ..." if given else f"{line} ..."


CONSOLE_TOKEN_FILE = "console-token"


def private(data_dir: Path) -> None:
    """The data folder and everything already in it (left by an earlier release, or by a
    process started with another umask) for its owner alone: 0700 folders, files without
    group or other permissions."""
    data_dir.chmod(0o700)
    for root, folders, files in os.walk(data_dir):
        for name in folders + files:
            path = Path(root) / name
            if path.is_symlink():
                continue
            mode = path.stat().st_mode
            if mode & 0o077:
                path.chmod(mode & ~0o077)


def console_env(data_dir: Path) -> dict[str, str]:
    """The console's port, and a development sign-in token (kept in a file only its owner can
    read, which the console reads too) unless the environment configures how operators sign in."""
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {"CONTINUITY_CONSOLE_PORT": os.environ.get("CONTINUITY_CONSOLE_PORT") or str(free_port())}
    if not os.environ.get("CONTINUITY_CONSOLE_IDENTITY_HEADER"):
        given = os.environ.get("CONTINUITY_CONSOLE_DEV_TOKEN")
        token = given or secrets.token_urlsafe(24)
        path = data_dir / CONSOLE_TOKEN_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
        if not given:  # a token of the environment stays where it is; else the file, never both
            env["CONTINUITY_CONSOLE_DEV_TOKEN_FILE"] = str(path)
    return env


def _say(line: str) -> None:
    print(line, flush=True)


def _shown(path: Path) -> str:
    """`path` as short as it can be said from here: relative when under this folder."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _print_endpoints(stack: Stack, env_file: Path) -> None:
    origin = "embedded" if stack.nats else "NATS_URL"
    print(f"NATS   {redacted_url(stack.nats_url)}  ({origin})")
    origin = "embedded" if stack.redis else "REDIS_URL"
    print(f"Redis  {redacted_url(stack.redis_url)}  ({origin})")
    for service in stack.services:
        print(f"{service.name:<15} metrics http://127.0.0.1:{service.metrics_port}/metrics")
    print(f"logs   {_shown(stack.data_dir)}/<service>.log")
    shown = (redacted_url(stack.nats_url), redacted_url(stack.redis_url))
    if shown == (stack.nats_url, stack.redis_url):
        print(f"\nIn another terminal (or `. {_shown(env_file)}`, which also holds the runner keys):")
        print(f"  export NATS_URL={shown[0]} REDIS_URL={shown[1]}")
    else:
        # The URLs carry passwords: they are in the env file, which only its owner reads, and
        # never on the terminal. The `continuity` commands read the file by themselves.
        print(f"\nIn another terminal, `. {_shown(env_file)}` sets NATS_URL and REDIS_URL (with their")
        print("passwords, made at this start) and the runner keys; `continuity` reads it by itself:")
        print(f"  . {_shown(env_file)}")
    venv_bin = Path(sys.executable).parent
    print(f"  export PATH={venv_bin}:$PATH   # puts `continuity` on PATH", flush=True)
