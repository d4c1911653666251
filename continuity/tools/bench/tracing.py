"""`continuity bench tracing`: what tracing costs the pipeline. One classifier process, measured
in one run under three settings, next to the raw baseline consumer of `bench pipeline`:

- `off`: no `OTEL_*` variable (those of the calling environment are removed first);
- `on`: every event traced and exported: `OTEL_EXPORTER_OTLP_ENDPOINT` names an OTLP receiver
  (`python -m continuity.devstack.otlp`, its own process) and `OTEL_TRACES_SAMPLER=always_on`;
  the load generator puts a `traceparent` (sampled, fresh random ids) on every event it
  publishes, as a runner SDK does;
- `sampled_out`: the same export configured, `OTEL_TRACES_SAMPLER=always_off`: the
  instrumentation without spans to export.

Each round measures the baseline, then each setting in turn (the order rotating from round to
round, so that drift hits all alike): the classifier is replaced by one started under the
setting's environment (SIGTERM, waited for, a new process waited until ready), a short warm-up
round, then the measured round. Events, sessions, outcomes and the load are `bench pipeline`'s.

The receiver writes each span it gets as a JSON line; the spans that arrive while a setting's
classifier runs (its drain exports what it buffered) are that setting's, and the spans of the
measured `on` rounds are found by the trace ids the load generator sent.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.msg import Msg

from continuity.cli.examples import examples
from continuity.tools.bench.deployment import (
    Deployment,
    add_production_argument,
    deployment,
    describe,
    machine,
    printed,
)
from continuity.tools.bench.pipeline import (
    BASELINE_IN,
    Outcomes,
    classifier_env,
    event,
    follow_outcomes,
    seed_sessions,
    start_baseline,
)
from continuity.tools.bench.stats import (
    Figures,
    cost_line,
    costs,
    costs_around,
    cpu_bound,
    load,
    median,
    ratio,
)
from shared.contract import ResumeFailed, subjects
from shared.platform.bus.connection import server_list

SETTINGS = ("off", "on", "sampled_out")
TARGET = 0.85
"""What the figures are read against, never asserted: `on` within 15% of `off`."""
SAMPLED_OUT_TARGET = 0.95
"""The same for `sampled_out`: within 5% of `off`."""
RECEIVER = "otlp receiver"
MEANING = (
    "the classifier, the OTLP receiver, the load generator, the baseline process and the servers share "
    "these cores; the settings' rounds alternate, so the machine's drift hits all alike"
)

_encode = msgspec.json.Encoder().encode


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("tracing", help="the pipeline with tracing off, on (all exported) and sampled out")
    p.add_argument("--events", type=int, default=3000, help="events per measurement (default 3000)")
    p.add_argument("--concurrency", type=int, default=256, help="events in flight (default 256)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; the median round is reported (default 3)")
    add_production_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)
    examples(p, "continuity bench tracing", "continuity bench tracing --rounds 5 --json")


def setting_env(setting: str, endpoint: str) -> dict[str, str]:
    """The classifier's environment under `setting`: `bench pipeline`'s, plus the `OTEL_*`
    variables that turn tracing on and choose its sampler."""
    env = classifier_env()
    if setting == "on":
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "always_on"}
    elif setting == "sampled_out":
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "always_off"}
    return env


def traceparent() -> str:
    """A new sampled W3C trace context, version 00: random trace and parent ids."""
    ids = os.urandom(24).hex()
    return f"00-{ids[:32]}-{ids[32:]}-01"


class Spans:
    """The receiver's output file, read on from where the last read stopped (whole lines only:
    a line may still be half written)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def read(self) -> list[str]:
        """The trace ids of the spans written since the last call."""
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        return [line.decode() for line in data[:end].splitlines() if line]


def start_receiver(out: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The OTLP receiver process, writing spans to `out`, and its endpoint."""
    out.touch()
    proc = subprocess.Popen(
        # Light: it reads only each span's trace id, so that it takes little of the cores the
        # classifier shares with it (a collector runs elsewhere in production).
        [sys.executable, "-m", "continuity.devstack.otlp", "--port", "0", "--out", str(out), "--light"],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("listening on "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the OTLP receiver did not start: {line or 'no output'}")
    return proc, line.removeprefix("listening on ")


def setting_figures(rounds: list[Figures], baseline: Figures) -> dict[str, Any]:
    """The figures of one setting: the median round, and costs over all its rounds."""
    mid = median(rounds)
    used = costs(rounds)
    return {
        "events_per_s": round(mid.per_s),
        "p50_ms": round(mid.p50_ms, 3),
        "p99_ms": round(mid.p99_ms, 3),
        "cpu_ms_per_event": used["cpu_ms_per_op"],
        "writes_per_event": used["writes_per_op"],
        "ratio_to_baseline": ratio(mid.per_s, baseline.per_s),
        "around_cpu_ms_per_event": costs_around(rounds),
        "rounds_per_s": [round(f.per_s) for f in rounds],
    }


def headers_of(events: list[ResumeFailed], traced: bool) -> list[dict[str, str]]:
    """Each event's message id and, when `traced`, a new traceparent, as a runner SDK sends."""
    headers: list[dict[str, str]] = [{"Nats-Msg-Id": e.event_id} for e in events]
    if traced:
        for h in headers:
            h["traceparent"] = traceparent()
    return headers


class Counted:
    """The spans the receiver wrote, by setting, and of them those of the measured `on` rounds
    (found by the trace ids the load generator sent)."""

    def __init__(self, spans: Spans) -> None:
        self.spans = spans
        self.received = dict.fromkeys(SETTINGS, 0)
        self.measured_traces: set[str] = set()
        self.measured_spans = 0
        self.traced: set[str] = set()

    def take(self, setting: str) -> None:
        """The spans written since the last look are `setting`'s (its classifier has stopped)."""
        ids = self.spans.read()
        self.received[setting] += len(ids)
        ours = [t for t in ids if t in self.measured_traces]
        self.measured_spans += len(ours)
        self.traced.update(ours)


async def measure(
    d: Deployment, args: argparse.Namespace, baseline_pid: int, receiver_pid: int, endpoint: str, spans: Spans
) -> dict[str, Any]:
    nc = await nats.connect(servers=server_list(d.stack.nats_url), pending_size=64 * 1024 * 1024)
    js = nc.jetstream()
    await seed_sessions(d.stack.redis_url)
    decisions, echoes = Outcomes(), Outcomes()

    async def on_decision(msg: Msg) -> None:
        await decisions.on_message(msg)

    await follow_outcomes(js, on_decision, echoes)
    loop = asyncio.get_running_loop()
    rounds_done = 0
    counted = Counted(spans)

    async def one_round(kind: str, total: int, measured: bool) -> Figures:
        """`kind` is "baseline" or a setting; only `on` sends a traceparent."""
        nonlocal rounds_done
        rounds_done += 1
        events = [event(f"{kind}{rounds_done}", i) for i in range(total)]
        payloads = [_encode(e) for e in events]
        headers = headers_of(events, kind == "on")
        if kind == "on" and measured:
            counted.measured_traces.update(h["traceparent"][3:35] for h in headers)
        baseline = kind == "baseline"
        outcomes = echoes if baseline else decisions
        pids = [baseline_pid] if baseline else d.pids("classifier")
        around = d.around() if baseline else {**d.around(), RECEIVER: [receiver_pid]}

        async def op(i: int) -> None:
            e = events[i]
            future = loop.create_future()
            outcomes.waiting[e.run_id] = future
            if baseline:
                subject = f"{BASELINE_IN}.{e.runner_id}"
            else:
                subject = subjects.event(e.runner_id, "resume_failed")
            await js.publish(subject, payloads[i], headers=headers[i])
            await asyncio.wait_for(future, 60)

        return await load(kind, op, total=total, concurrency=args.concurrency, pids=pids, around=around)

    warmup = min(1000, args.events)
    rounds: dict[str, list[Figures]] = {kind: [] for kind in ("baseline", *SETTINGS)}
    await one_round("baseline", warmup, False)
    current = "off"  # the classifier `main` started
    for r in range(args.rounds):
        rounds["baseline"].append(await one_round("baseline", args.events, True))
        for setting in SETTINGS[r % 3 :] + SETTINGS[: r % 3]:
            await d.replace_async("classifier", setting_env(setting, endpoint))
            counted.take(current)
            current = setting
            await one_round(setting, warmup, False)
            rounds[setting].append(await one_round(setting, args.events, True))
    await d.replace_async("classifier", setting_env("off", endpoint))  # the last one drains
    counted.take(current)
    version = nc.connected_server_version
    await nc.close()
    return result_of(args, rounds, counted, f"{version.major}.{version.minor}.{version.patch}")


def bound_of(setting: dict[str, Any], off: dict[str, Any], target: float) -> dict[str, float]:
    """`stats.cpu_bound` of a setting against `off`: the throughput ratio their summed CPU per
    event allows on shared cores. The OTLP receiver is left out of both sums: a deployment runs
    its collector elsewhere, and off sends it nothing."""

    def others(s: dict[str, Any]) -> dict[str, float]:
        return {name: ms for name, ms in s["around_cpu_ms_per_event"].items() if name != RECEIVER}

    return cpu_bound(
        setting["cpu_ms_per_event"], others(setting), off["cpu_ms_per_event"], others(off), target
    )


def result_of(
    args: argparse.Namespace, rounds: dict[str, list[Figures]], counted: Counted, nats_version: str
) -> dict[str, Any]:
    """The figures of the baseline and of each setting, and their ratios."""
    base = median(rounds["baseline"])
    raw = costs(rounds["baseline"])
    figures = {s: setting_figures(rounds[s], base) for s in SETTINGS}
    for s in SETTINGS:
        figures[s]["spans_received"] = counted.received[s]
    off, on, out = (figures[s] for s in SETTINGS)
    on_bound, out_bound = bound_of(on, off, TARGET), bound_of(out, off, SAMPLED_OUT_TARGET)
    return {
        "events": args.events,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "production": args.production,
        "settings": figures,
        "baseline": {
            "events_per_s": round(base.per_s),
            "p50_ms": round(base.p50_ms, 3),
            "p99_ms": round(base.p99_ms, 3),
            "cpu_ms_per_event": raw["cpu_ms_per_op"],
            "around_cpu_ms_per_event": costs_around(rounds["baseline"]),
            "rounds_per_s": [round(f.per_s) for f in rounds["baseline"]],
        },
        "on_off_throughput": ratio(on["events_per_s"], off["events_per_s"]),
        "on_off_cpu": ratio(on["cpu_ms_per_event"], off["cpu_ms_per_event"]),
        "sampled_out_off_throughput": ratio(out["events_per_s"], off["events_per_s"]),
        "sampled_out_off_cpu": ratio(out["cpu_ms_per_event"], off["cpu_ms_per_event"]),
        "on_off_cpu_ratio": on_bound["cpu_ratio"],
        "on_cpu_budget_ms_per_event": on_bound["cpu_budget_ms"],
        "sampled_out_off_cpu_ratio": out_bound["cpu_ratio"],
        "sampled_out_cpu_budget_ms_per_event": out_bound["cpu_budget_ms"],
        "target_on_off_throughput": TARGET,
        "target_sampled_out_off_throughput": SAMPLED_OUT_TARGET,
        "on_measured_events": len(counted.measured_traces),
        "on_measured_spans": counted.measured_spans,
        "on_measured_traced": len(counted.traced),
        "nats_version": nats_version,
    }


def report(result: dict[str, Any]) -> str:
    settings, base = result["settings"], result["baseline"]
    lines = [
        f"tracing benchmark: {result['events']} events x {result['rounds']} rounds, "
        f"{result['concurrency']} in flight, 1 classifier (median round)",
        f"  {'':<34}{'events/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'CPU ms/event':>14}{'to baseline':>13}"
        f"{'spans':>9}",
        f"  {'baseline: fetch, ack, publish':<34}{base['events_per_s']:>10}{base['p50_ms']:>10}"
        f"{base['p99_ms']:>10}{base['cpu_ms_per_event']:>14}",
    ]
    labels = {
        "off": "tracing off",
        "on": "on: always_on, all exported",
        "sampled_out": "sampled out: always_off",
    }
    for name, label in labels.items():
        s = settings[name]
        lines.append(
            f"  {label:<34}{s['events_per_s']:>10}{s['p50_ms']:>10}{s['p99_ms']:>10}"
            f"{s['cpu_ms_per_event']:>14}{s['ratio_to_baseline']:>13.3f}{s['spans_received']:>9}"
        )
    lines += [
        f"  on / off: throughput {result['on_off_throughput']:.3f}, CPU {result['on_off_cpu']:.3f}"
        f"  (target: on within 15% of off, i.e. throughput ratio >= {result['target_on_off_throughput']})",
        f"  sampled_out / off: throughput {result['sampled_out_off_throughput']:.3f}, "
        f"CPU {result['sampled_out_off_cpu']:.3f}  (target: throughput ratio >= "
        f"{result['target_sampled_out_off_throughput']})",
        f"  what the summed CPU allows (OTLP receiver left out): on / off {result['on_off_cpu_ratio']:.3f}"
        f" (the classifier may spend {result['on_cpu_budget_ms_per_event']} ms/event for"
        f" {result['target_on_off_throughput']}), sampled_out / off {result['sampled_out_off_cpu_ratio']:.3f}"
        f" ({result['sampled_out_cpu_budget_ms_per_event']} ms/event for"
        f" {result['target_sampled_out_off_throughput']})",
        f"  measured on rounds: {result['on_measured_events']} events sent with a traceparent, "
        f"{result['on_measured_traced']} of their traces received, {result['on_measured_spans']} spans",
    ]
    for name, label in labels.items():
        lines.append(
            f"  CPU ms/event elsewhere, {label.split(':')[0]}: "
            f"{cost_line(settings[name]['around_cpu_ms_per_event'])}"
        )
    lines += [
        f"  CPU ms/event elsewhere, baseline: {cost_line(base['around_cpu_ms_per_event'])}",
        "  CPU ms/event: utime+stime of the classifier process (its export thread included) per event",
        "  spans: received by the OTLP receiver while the setting's classifier ran, warm-up rounds included",
        *describe(result)[:2],
        f"  {MEANING}",
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.events < 1 or args.concurrency < 1 or args.rounds < 1:
        print("error: --events, --concurrency and --rounds must be at least 1", file=sys.stderr)
        return 2
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        del os.environ[name]  # `off` means no OTEL_* variable; the services inherit this environment
    started = machine()
    with (
        tempfile.TemporaryDirectory(prefix="continuity-bench-") as tmp,
        deployment(Path(tmp), args.production) as d,
    ):
        baseline: subprocess.Popen[bytes] | None = None
        receiver: subprocess.Popen[bytes] | None = None
        try:
            spans = Spans(Path(tmp) / "spans.jsonl")
            receiver, endpoint = start_receiver(spans.path)
            # The classifier first: it creates the streams the bench subscribes to.
            d.scale("classifier", 1, setting_env("off", endpoint))
            baseline = start_baseline(d)
            import uvloop

            result = uvloop.run(measure(d, args, baseline.pid, receiver.pid, endpoint, spans))
        finally:
            for proc in (baseline, receiver):
                if proc is not None:
                    proc.terminate()
                    proc.wait()
        result["servers"] = d.facts
    return printed(result, started, args.json, report)
