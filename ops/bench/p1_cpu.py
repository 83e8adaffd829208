"""CPU accounting from /proc: per-process CPU seconds and the whole machine's busy time.

The machine is shared (two cores, other engineers' tests), so every timed window also
records how much CPU went to processes that are not part of the measurement.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """utime + stime of every thread of `pid`, in seconds; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def status_mib(pid: int, field: str = "VmRSS") -> float:
    """A memory figure of /proc/PID/status in MiB: VmRSS (resident now) or VmHWM (its peak)."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return int(fields[field].split()[0]) / 1024


def machine_cpu_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores together."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / TICKS_PER_S, sum(values) / TICKS_PER_S


def wait_for_quiet(max_wait_s: float, busy_below: float = 0.15, sample_s: float = 1.0) -> float:
    """Wait (up to `max_wait_s`) until the machine is under `busy_below` busy over one sample.

    Returns the last busy fraction seen (other people's tests share these cores).
    """
    deadline = time.monotonic() + max_wait_s
    while True:
        busy0, total0 = machine_cpu_s()
        time.sleep(sample_s)
        busy1, total1 = machine_cpu_s()
        fraction = (busy1 - busy0) / max(total1 - total0, 1e-9)
        if fraction < busy_below or time.monotonic() >= deadline:
            return fraction


@dataclass
class CpuMeter:
    """CPU seconds of named processes, of this process and of the machine between snapshots."""

    pids: dict[str, int] = field(default_factory=dict)

    def snapshot(self) -> dict[str, float]:
        shot = {name: process_cpu_s(pid) for name, pid in self.pids.items()}
        shot["self"] = time.process_time()
        shot["machine_busy"], shot["machine_total"] = machine_cpu_s()
        return shot

    @staticmethod
    def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: after[k] - before[k] for k in before}
