"""`continuity simulate`: its options, and the run from options to exit code."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from typing import TextIO

import msgspec

from continuity.cli import arguments, connect, envfile
from continuity.cli.examples import examples
from continuity.tools.simulate.fleet import Fleet, FleetError, Progress
from continuity.tools.simulate.keys import DEMO_KEYS_ENV, parse_keys
from continuity.tools.simulate.report import final_report, progress_counts, progress_line, to_json
from continuity.tools.simulate.result import Settings
from continuity.tools.simulate.scenarios import DEFAULT_MIX, SCENARIOS, parse_mix
from shared.platform import tracing

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
        "resolves reconciliations and retries stopped runs. After a retry, a replacement or a "
        "fresh start the session completes its turn with its scenario's probability (the "
        "runner reports turn_completed) or the run fails again; at the end runs list must show "
        "each recovered run's final status and runs stats must judge every decision as the "
        "runners saw it. Exit code 1 on any contradiction, or an expected decision or outcome "
        "that never arrived.",
        epilog="scenarios: " + "; ".join(f"{s.name}: {s.label}" for s in SCENARIOS.values()),
    )
    _workload_arguments(p)
    _stack_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)
    examples(
        p,
        "continuity simulate                                 # against `continuity up`",
        "continuity simulate --scenario pending,refusal --no-operator --events 10",
        "continuity simulate --seconds 60 --rate 20 --json",
    )


def _workload_arguments(p: argparse.ArgumentParser) -> None:
    """What the fleet does: how many runs, how fast, which scenarios, how archives answer."""
    p.add_argument(
        "--runners", type=arguments.number(int, 1, 1000), default=4, help="simulated runners (default 4)"
    )
    amount = p.add_mutually_exclusive_group()
    amount.add_argument(
        "--events",
        type=arguments.number(int, 1),
        help="runs to start, each with one resume failure (default 200)",
    )
    amount.add_argument("--seconds", type=_positive, help="start runs for this long instead of --events")
    p.add_argument("--rate", type=_positive, default=50.0, help="runs started per second (default 50)")
    kinds = p.add_mutually_exclusive_group()
    kinds.add_argument("--mix", default=DEFAULT_MIX, help=f"scenario weights (default {DEFAULT_MIX})")
    kinds.add_argument(
        "--scenario",
        metavar="NAME[,NAME]",
        help="only these scenarios, in their default proportions (names below)",
    )
    p.add_argument(
        "--no-operator",
        action="store_true",
        help="the simulated operator does nothing: stopped runs wait for a person "
        "(continuity reconciliations list / runs retry)",
    )
    p.add_argument(
        "--archive-fail-rate", type=_rate, default=0.1, help="archive requests answered with a failure"
    )
    p.add_argument(
        "--archive-timeout-rate", type=_rate, default=0.05, help="archive requests never answered (timeouts)"
    )


def _stack_arguments(p: argparse.ArgumentParser) -> None:
    """The stack simulated against: its waits, where it is, the keys it shares with runners."""
    p.add_argument(
        "--archive-timeout",
        type=_positive,
        default=None,
        help="the archiver's CONTINUITY_ARCHIVE_TIMEOUT_S (default: that variable, or 30)",
    )
    p.add_argument(
        "--deadline", type=_positive, default=20.0, help="seconds a decision may take (default 20)"
    )
    p.add_argument("--seed", type=int, help="seed of the draws (scenarios, policies, events, turn outcomes)")
    p.add_argument(
        "--nats-url",
        default=None,
        help=f"NATS server (default: $NATS_URL, else {envfile.ENV_FILE}'s, else {connect.DEFAULT_NATS_URL})",
    )
    p.add_argument(
        "--keys",
        default=None,
        help="runner keys as CONTINUITY_RUNNER_KEYS, which the services must share (default: "
        f"$CONTINUITY_RUNNER_KEYS, else {envfile.ENV_FILE}'s as `continuity up` writes it, "
        "else the demo keys of `continuity up --demo`)",
    )


def scenario_mix(names: str) -> dict[str, int]:
    """`--scenario a,b`: those scenarios with their default weights (1 for one weighted 0)."""
    default = parse_mix(DEFAULT_MIX)
    chosen = parse_mix(",".join(f"{n.strip()}=1" for n in names.split(",") if n.strip()))
    return {name: default.get(name, 1) for name in chosen}


def settings_from(args: argparse.Namespace) -> Settings:
    if args.archive_fail_rate + args.archive_timeout_rate > 1:
        raise ValueError("--archive-fail-rate plus --archive-timeout-rate is more than 1")
    return Settings(
        runners=args.runners,
        events=None if args.seconds is not None else (args.events or 200),
        seconds=args.seconds,
        rate=args.rate,
        mix=scenario_mix(args.scenario) if args.scenario else parse_mix(args.mix),
        archive_fail_rate=args.archive_fail_rate,
        archive_timeout_rate=args.archive_timeout_rate,
        seed=args.seed,
        nats_url=connect.nats_url(args),
        keys=parse_keys(args.keys or envfile.setting("CONTINUITY_RUNNER_KEYS") or DEMO_KEYS_ENV),
        deadline_s=args.deadline,
        archive_timeout_s=args.archive_timeout or _archive_timeout(),
        operator=not args.no_operator,
    )


def _archive_timeout() -> float:
    text = os.environ.get("CONTINUITY_ARCHIVE_TIMEOUT_S")
    try:
        return float(text) if text else 30.0
    except ValueError:
        raise ValueError("CONTINUITY_ARCHIVE_TIMEOUT_S is not a number") from None


class LiveProgress:
    """On a terminal, one line redrawn in place (cut to the terminal's width); otherwise a line
    each time the counts change, so that a log gets no line per second."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.terminal = stream.isatty()
        self.last = ""
        self.drawn = False

    def __call__(self, elapsed: float, fleet: Fleet) -> None:
        if self.terminal:
            width = min(os.get_terminal_size(self.stream.fileno()).columns - 1, 200)
            line = progress_line(elapsed, fleet.published, fleet.checker, width)
            self.stream.write(f"\r{line}\x1b[K")
            self.drawn = True
        else:
            counts = progress_counts(fleet.published, fleet.checker)
            if counts == self.last:
                return
            self.last = counts
            self.stream.write(progress_line(elapsed, fleet.published, fleet.checker) + "\n")
        self.stream.flush()

    def end(self) -> None:
        """Leaves the redrawn line in place, and the cursor on the next one."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def main(args: argparse.Namespace) -> int:
    try:
        settings = settings_from(args)
        tracing.setup("sim")  # OTEL_* set: the simulated runners' runs are traced too
    except ValueError as err:  # ConfigError and TracingConfigError are ValueErrors too
        print(f"continuity: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    live = LiveProgress(sys.stderr)
    progress: Progress | None = None if args.quiet else live

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        fleet = Fleet(settings)
        try:
            result = await fleet.run(stop, progress=progress)
            if progress is not None:
                # The final counts, also for a run shorter than the progress line's period.
                progress(result.elapsed_s, fleet)
        except FleetError as err:
            print(f"continuity: error: {err}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        finally:
            live.end()
            tracing.shutdown()
        if args.json:
            print(msgspec.json.encode(to_json(result)).decode())
        else:
            print(final_report(result))
        return EXIT_OK if result.ok else EXIT_CONTRADICTION

    return asyncio.run(run())
