#!/usr/bin/env python3
"""Benchmark: the CPU a worker's data path spends on an item, alone (no Kafka, no worker).

One `BatchingPipeline` (decode -> batch -> infer, `serving/pipeline.py`) with the worker's
metrics hooks and its default settings on a `sim:ms=0` model (no model time: what is left is
the pipeline's own), fed `--tasks` tasks of `--items` ImageNet-like paths, top-5, a few tasks
at a time as the worker's consumer hands them over. Per round: items/s, and the process's
CPU (user + system, every thread) and wall microseconds an item. Compare two trees by running
it with each one's `src` first on PYTHONPATH, alternated:

    PYTHONPATH=TREE/src .venv/bin/python ops/bench/pipeline_cpu.py [--tasks 1500]
        [--items 64] [--rounds 3]

The first round pays for the first batches (thread start, the first measurements): read the
later ones.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from imagenet_items import item_name

MODEL = "sim:ms=0"
#: tasks handed to the pipeline before the event loop runs its batches again
HANDED_AT_ONCE = 8


@dataclass(frozen=True)
class Round:
    items: int
    items_per_s: float
    cpu_us_per_item: float
    wall_us_per_item: float


async def _rounds(tasks: int, items: int, rounds: int) -> list[Round]:
    from prometheus_client import CollectorRegistry

    from inferstream.config import WorkerConfig
    from inferstream.models.registry import load_model
    from inferstream.schemas.records import Task, TaskItem
    from inferstream.serving.metrics import ServingMetrics
    from inferstream.serving.pipeline import BatchingPipeline, TaskRun

    pipeline = BatchingPipeline(load_model(MODEL), WorkerConfig(models=(MODEL,)),
                                ServingMetrics(CollectorRegistry(), "bench", "default"))
    batches = asyncio.create_task(pipeline.run_forever())
    measured = []
    try:
        for _ in range(rounds):
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            left = [tasks]

            def finished(_: TaskRun, left: list[int] = left,
                         done: asyncio.Future[None] = done) -> None:
                left[0] -= 1
                if left[0] == 0:
                    done.set_result(None)
            cpu, wall = time.process_time(), time.perf_counter()
            for number in range(tasks):
                task = Task(job_id="bench", task_id=number, attempt=1, pool="default",
                            model=MODEL, model_version=None, top_k=5, issued_at=0,
                            deadline_ms=None, home_partition=None, items=[
                                TaskItem(index=i, name=item_name(number * items + i),
                                         data=None) for i in range(items)])
                pipeline.submit(TaskRun(task, finished))
                if number % HANDED_AT_ONCE == HANDED_AT_ONCE - 1:
                    await asyncio.sleep(0)
            await done
            cpu, wall, n = time.process_time() - cpu, time.perf_counter() - wall, tasks * items
            measured.append(Round(n, n / wall, cpu / n * 1e6, wall / n * 1e6))
    finally:
        batches.cancel()
        pipeline.close()
    return measured


def main(argv: list[str] | None = None) -> list[Round]:
    parser = argparse.ArgumentParser(prog="ops/bench/pipeline_cpu.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1500, help="tasks a round")
    parser.add_argument("--items", type=int, default=64, help="items a task")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    measured = asyncio.run(_rounds(args.tasks, args.items, args.rounds))
    for number, r in enumerate(measured):
        print(f"round {number}: {r.items:,} items, {r.items_per_s:,.0f} items/s, "
              f"{r.cpu_us_per_item:.1f} us of CPU an item, {r.wall_us_per_item:.1f} us wall",
              flush=True)
    return measured


if __name__ == "__main__":
    main()
