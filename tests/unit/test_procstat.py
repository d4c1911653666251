"""Reading CPU time and system calls from /proc, as the benchmarks do."""

from __future__ import annotations

import os
import time

from continuity.tools.bench import procstat


def test_cpu_time_is_read_after_a_command_name_with_spaces_and_parentheses() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    # pid, (comm), state, ppid, pgrp, session, tty, tpgid, flags, minflt, cminflt, majflt,
    # cmajflt, utime, stime, cutime, cstime, ...
    line = f"4242 (a) b (c) S 1 1 1 0 -1 0 5 0 0 0 {3 * ticks} {ticks} 700 800 20 0 1 0".encode()
    assert procstat.stat_cpu_s(line) == 4.0  # utime + stime; the children's times are not counted


def test_usage_of_this_process_counts_its_cpu_time_and_write_calls() -> None:
    before = procstat.usage([os.getpid()])
    burn_until = time.process_time() + 0.2  # the kernel's own account, read another way
    while time.process_time() < burn_until:
        sum(i * i for i in range(1000))
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        for _ in range(100):
            os.write(fd, b"x")
    finally:
        os.close(fd)
    used = procstat.usage([os.getpid()]) - before
    assert 0.15 <= used.cpu_s < 5  # 0.2 s, give or take a clock tick at each end
    assert used.writes >= 100
    assert procstat.per_op_ms(procstat.Usage(0.5, 10, 4), 1000) == 0.5
    assert procstat.per_op(10, 4) == 2.5
    assert procstat.per_op(10, 0) == 0.0
