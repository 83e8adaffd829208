"""The CPU of the controller's deadline pass (`Deadlines.late`, once a second) on a large pool.

In-process, no Kafka: a `Deadlines` of W workers of one task partition each, every worker with
`RECENT` results of the same speed (seconds per item drawn from a narrow range, so no worker is
slow and none of the tasks is due), T outstanding tasks of 64 items round robin over them; then
P passes, one simulated second apart. Prints the CPU per pass. Run it with a tree's `src`
first on `PYTHONPATH` to measure that tree:

    python ops/bench/deadline_pass.py [--workers 100] [--tasks 300] [--passes 30]
"""

from __future__ import annotations

import argparse
import random
import time

from inferstream.controller.deadlines import Deadlines
from inferstream.controller.declines import PoolView
from inferstream.controller.speculation import RECENT
from inferstream.policy.view import NO_POLICY
from inferstream.schemas.records import Task, TaskItem

MODEL = "sim:ms=0"
ITEMS = 64


class Clock:
    """The controller's clock in ms, moved by the benchmark."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def task(task_id: int) -> Task:
    return Task(job_id="job-1", task_id=task_id, attempt=1, pool="default", model=MODEL,
                model_version=None, top_k=1,
                items=[TaskItem(index=task_id * ITEMS + i, name=f"item-{task_id}-{i}",
                                data=None) for i in range(ITEMS)],
                issued_at=0, deadline_ms=None, home_partition=0)


def pass_cpu_ms(workers: int, tasks: int, passes: int) -> tuple[float, int]:
    """CPU ms per `late()` pass, and the tasks the passes moved."""
    owners = {f"w{i}": [i] for i in range(workers)}
    view = PoolView(describe=lambda _group: owners)
    clock = Clock()
    deadlines = Deadlines(view, NO_POLICY, lambda pool: f"{pool}.workers", slack=3.0,
                          floor_s=20.0, max_attempts=4, speculation_floor_s=2.0,
                          speculation_cap=0.1, clock=clock)
    rng = random.Random(1)
    for worker in owners:
        view.record_result(worker, MODEL)
        for _ in range(RECENT):
            deadlines.observe(worker, MODEL, ITEMS, rng.uniform(2.9, 3.3))
    for task_id in range(tasks):
        deadlines.issued(task(task_id), 0, task_id % workers, clock.ms)
    moved, started = 0, time.process_time()
    for _ in range(passes):
        clock.ms += 1000
        moved += len(deadlines.late(clock.ms))
    return (time.process_time() - started) / passes * 1000, moved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--passes", type=int, default=30)
    args = parser.parse_args()
    cpu_ms, moved = pass_cpu_ms(args.workers, args.tasks, args.passes)
    print(f"{args.workers} workers, {args.tasks} outstanding tasks: {cpu_ms:.2f} ms of CPU "
          f"a pass ({args.passes} passes, {moved} tasks moved)")


if __name__ == "__main__":
    main()
