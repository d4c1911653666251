"""`continuity up`: run every service against NATS and Redis, printing where things listen."""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import threading
from pathlib import Path

from continuity import registry
from continuity.servers import free_port
from continuity.stack import Stack


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = sub.add_parser(
        "up",
        help="run Continuity locally (embedded NATS and Redis unless "
        "NATS_URL / REDIS_URL are set) until Ctrl-C",
    )
    up.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".continuity"),
        help="where embedded servers keep their data (default: .continuity)",
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


def run(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stack = Stack(data_dir=args.data_dir.resolve())
    code = 0
    try:
        stack.start_servers()
        demo_env = {}
        if args.demo:
            from continuity.simulate import demo_environment

            demo_env = demo_environment()
        console: dict[str, str] = {}
        for name in registry.available():
            log = stack.data_dir / f"{name}.log"
            extra = dict(demo_env)
            if name == "console":
                console = _console_env(stack.data_dir)
                extra.update(console)
            stack.start_service(name, extra, log_path=log)
        stack.wait_ready()
        _print_endpoints(stack)
        if console:
            print(
                f"console         http://127.0.0.1:{console['CONTINUITY_CONSOLE_PORT']}/  "
                f"sign-in token in {stack.data_dir / CONSOLE_TOKEN_FILE}",
                flush=True,
            )
        if args.demo:
            from continuity.simulate import run_demo

            code = run_demo(stack, seconds=args.demo_seconds, stop=stop)
        else:
            print("Ctrl-C stops everything.", flush=True)
            while not stop.wait(0.5):
                for service in stack.services:
                    if service.proc.poll() is not None:
                        print(f"{service.name} exited with code {service.proc.returncode}", file=sys.stderr)
                        stop.set()
                        code = 1
    finally:
        print("stopping...", flush=True)
        stack.stop()
    return code


CONSOLE_TOKEN_FILE = "console-token"


def _console_env(data_dir: Path) -> dict[str, str]:
    """The console's port, and a development sign-in token (kept in a file only its owner can
    read) unless the environment configures how operators sign in."""
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {"CONTINUITY_CONSOLE_PORT": os.environ.get("CONTINUITY_CONSOLE_PORT") or str(free_port())}
    if not os.environ.get("CONTINUITY_CONSOLE_IDENTITY_HEADER"):
        token = os.environ.get("CONTINUITY_CONSOLE_DEV_TOKEN") or secrets.token_urlsafe(24)
        path = data_dir / CONSOLE_TOKEN_FILE
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(token + "\n")
        env["CONTINUITY_CONSOLE_DEV_TOKEN"] = token
    return env


def _print_endpoints(stack: Stack) -> None:
    origin = "embedded" if stack.nats else "NATS_URL"
    print(f"NATS   {stack.nats_url}  ({origin})")
    origin = "embedded" if stack.redis else "REDIS_URL"
    print(f"Redis  {stack.redis_url}  ({origin})")
    for service in stack.services:
        print(
            f"{service.name:<15} metrics http://127.0.0.1:{service.metrics_port}/metrics  "
            f"log {stack.data_dir / (service.name + '.log')}"
        )
    print(f"data   {stack.data_dir}", flush=True)
