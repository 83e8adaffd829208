"""How many threads a worker's forward pass and its decoding get, on purpose.

torch sizes its intra-op pool to every core it sees, and the worker decodes items on a
thread pool of its own next to it; sized apart, the two fight for the same cores. The plan:

- On a CPU device the forward pass is the work (20-80 ms per image against 3-5 ms to decode
  one, BENCHMARKS.md P1), so torch gets every core, and decoding gets one thread per four
  cores (at least one): decoded just ahead of the model, it fills the forward pass's gaps.
- On CUDA the forward pass runs on the GPU and the cores are for decoding: one core is left
  to the event loop and the inference thread, the rest decode, and torch keeps one thread.

Cores are the ones this process may run on (its affinity), fewer where a cgroup quota (a
container's `--cpus`) allows less. `torch_threads` or `decode_threads` above 0 is taken as
given. Decode threads run torch's element-wise ops (`to_tensor`, normalising) one-threaded, so
that each does not start an OpenMP team of its own: torch's thread count is per thread in an
OpenMP build, and each pool's threads set theirs when they start (`thread_initializer`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

#: Where a cgroup v2 CPU quota is: "<quota> <period>", or "max <period>".
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"


@dataclass(frozen=True)
class ThreadPlan:
    torch_threads: int
    decode_threads: int
    cores: int
    device: str
    #: the settings the plan chose (the others were given)
    derived: tuple[str, ...] = ()

    def describe(self) -> str:
        def how(name: str) -> str:
            return "derived" if name in self.derived else "set"
        return (f"threads: torch {self.torch_threads} ({how('torch_threads')}), decode "
                f"{self.decode_threads} ({how('decode_threads')}); {self.cores} cores, "
                f"device {self.device}")


def available_cores(cgroup_cpu_max: str = CGROUP_CPU_MAX) -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    try:
        with open(cgroup_cpu_max, encoding="ascii") as limit:
            quota, period = limit.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def plan_threads(device: str, torch_threads: int = 0, decode_threads: int = 0,
                 cores: int | None = None) -> ThreadPlan:
    """The threads for a worker on `device` ("cpu", "cuda", "cuda:N"); 0 derives one."""
    cores = available_cores() if cores is None else max(1, cores)
    on_gpu = device.startswith("cuda")
    derived = []
    if torch_threads <= 0:
        torch_threads = 1 if on_gpu else cores
        derived.append("torch_threads")
    if decode_threads <= 0:
        decode_threads = max(1, cores - 1) if on_gpu else max(1, cores // 4)
        derived.append("decode_threads")
    return ThreadPlan(torch_threads, decode_threads, cores, device, tuple(derived))


def thread_initializer(threads: int) -> Callable[[], None]:
    """A ThreadPoolExecutor initializer that gives each of its threads `threads` torch
    intra-op threads."""
    def initialize() -> None:
        import torch

        torch.set_num_threads(threads)
    return initialize
