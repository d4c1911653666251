"""`continuity simulate`: its options, and the run from options to exit code."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys

import msgspec

from continuity.simulate.fleet import Fleet, FleetError, Settings, stderr_progress
from continuity.simulate.keys import DEMO_KEYS_ENV, parse_keys
from continuity.simulate.report import final_report, to_json
from continuity.simulate.scenarios import DEFAULT_MIX, SCENARIOS, parse_mix

EXIT_OK = 0
EXIT_CONTRADICTION = 1
EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 4


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate",
        help="run a fleet of simulated runners against Continuity and check every decision",
        description="Simulated runners commit sessions, fail resumes in a mix of ways, answer "
        "archive requests and check each decision against the contract; a simulated operator "
        "resolves reconciliations and retries stopped runs. Exit code 1 on any contradiction "
        "or an expected decision that never arrived.",
        epilog="scenarios: " + "; ".join(f"{s.name}: {s.label}" for s in SCENARIOS.values()),
    )
    p.add_argument("--runners", type=int, default=4, help="simulated runners (default 4)")
    amount = p.add_mutually_exclusive_group()
    amount.add_argument(
        "--events", type=int, help="runs to start, each with one resume failure (default 200)"
    )
    amount.add_argument("--seconds", type=_positive, help="start runs for this long instead of --events")
    p.add_argument("--rate", type=_positive, default=50.0, help="runs started per second (default 50)")
    p.add_argument("--mix", default=DEFAULT_MIX, help=f"scenario weights (default {DEFAULT_MIX})")
    p.add_argument(
        "--archive-fail-rate", type=_rate, default=0.1, help="archive requests answered with a failure"
    )
    p.add_argument(
        "--archive-timeout-rate", type=_rate, default=0.05, help="archive requests never answered (timeouts)"
    )
    p.add_argument(
        "--archive-timeout",
        type=_positive,
        default=float(os.environ.get("CONTINUITY_ARCHIVE_TIMEOUT_S") or 30.0),
        help="the archiver's CONTINUITY_ARCHIVE_TIMEOUT_S (default: that variable, or 30)",
    )
    p.add_argument(
        "--deadline", type=_positive, default=20.0, help="seconds a decision may take (default 20)"
    )
    p.add_argument("--seed", type=int, help="seed of the scenario draws")
    p.add_argument(
        "--nats-url",
        default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"),
        help="NATS server (default: $NATS_URL or nats://127.0.0.1:4222)",
    )
    p.add_argument(
        "--keys",
        default=DEMO_KEYS_ENV,
        help="runner keys as CONTINUITY_RUNNER_KEYS (default: the demo keys; the services must be "
        "started with the same value)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)


def settings_from(args: argparse.Namespace) -> Settings:
    if args.runners < 1:
        raise ValueError("--runners must be at least 1")
    if args.events is not None and args.events < 1:
        raise ValueError("--events must be at least 1")
    if args.archive_fail_rate + args.archive_timeout_rate > 1:
        raise ValueError("--archive-fail-rate plus --archive-timeout-rate is more than 1")
    return Settings(
        runners=args.runners,
        events=None if args.seconds is not None else (args.events or 200),
        seconds=args.seconds,
        rate=args.rate,
        mix=parse_mix(args.mix),
        archive_fail_rate=args.archive_fail_rate,
        archive_timeout_rate=args.archive_timeout_rate,
        seed=args.seed,
        nats_url=args.nats_url,
        keys=parse_keys(args.keys),
        deadline_s=args.deadline,
        archive_timeout_s=args.archive_timeout,
    )


def main(args: argparse.Namespace) -> int:
    try:
        settings = settings_from(args)
    except ValueError as err:  # ConfigError is a ValueError too
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        try:
            result = await Fleet(settings).run(stop, progress=None if args.quiet else stderr_progress)
        except FleetError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        if args.json:
            print(msgspec.json.encode(to_json(result)).decode())
        else:
            print(final_report(result))
        return EXIT_OK if result.ok else EXIT_CONTRADICTION

    return asyncio.run(run())
