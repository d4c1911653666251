"""What processes spent, read from /proc: CPU time (`utime` + `stime` of /proc/<pid>/stat, in
clock ticks, usually 10 ms) and write and read system calls (`syscw`, `syscr` of
/proc/<pid>/io). Measured around a round of load, divided by the round's events or requests."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Usage:
    cpu_s: float
    writes: int
    reads: int

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpu_s - other.cpu_s, self.writes - other.writes, self.reads - other.reads)

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_s + other.cpu_s, self.writes + other.writes, self.reads + other.reads)


NOTHING = Usage(0.0, 0, 0)


def stat_cpu_s(stat: bytes) -> float:
    """utime + stime of one /proc/<pid>/stat line, in seconds."""
    # The command name (field 2) is in parentheses and may hold spaces and parentheses: count
    # from the last closing one.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # fields 14 and 15 of proc(5)


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return stat_cpu_s(f.read())


def syscalls(pid: int) -> tuple[int, int]:
    """(writes, reads) of `pid`; (0, 0) where /proc/<pid>/io cannot be read."""
    counts: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                name, _, value = line.partition(":")
                counts[name] = int(value)
    except OSError:
        return 0, 0
    return counts.get("syscw", 0), counts.get("syscr", 0)


def usage(pids: Iterable[int]) -> Usage:
    """The sum over `pids` (each one process; its threads are included, its children not)."""
    total = NOTHING
    for pid in pids:
        writes, reads = syscalls(pid)
        total = total + Usage(cpu_s(pid), writes, reads)
    return total


def per_op_ms(used: Usage, ops: int) -> float:
    return round(used.cpu_s * 1000 / ops, 4) if ops else 0.0


def per_op(count: int, ops: int) -> float:
    return round(count / ops, 3) if ops else 0.0
