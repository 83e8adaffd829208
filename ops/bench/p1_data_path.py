#!/usr/bin/env python3
"""Benchmark P1 without Kafka: the worker's data path against the plain PyTorch loop, any device.

The worker's own classes, as `inferstream worker` builds them (`serving/loader.py`
prepares the model: precision, channels-last, compiled, JPEGs decoded on the device where
chosen; `serving/pipeline.py` decodes on its threads, batches and infers), run tasks of
`--chunk` images straight from memory, timed from the first task submitted to the last item's
outcome. Against it, in fresh processes, `p1_bare_loop.py`: the plain loop (a), and the same
loop with the worker's allocator and torch threads (b). For the machines that have a GPU and
no Kafka (no Java):

    python ops/bench/p1_data_path.py --device cuda [--models M ...] [--images N] [--batch N]

Prints one Markdown table and the command. Needs torch, torchvision, Pillow and scikit-image, and
inferstream's import path (fastavro, aiokafka, confluent-kafka: `ops/bench/gpu_wheels.sh`
fetches them for a machine without them; `ops/bench/gpu_check.sh` runs this there).
Each side runs `--repeats` times alternately; the fastest run counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from p1_bare_loop import loop_env
from p1_photos import make_images

from inferstream.config import Config, WorkerConfig
from inferstream.schemas.records import ItemStatus, Task, TaskItem
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loader import model_loader
from inferstream.serving.pipeline import BatchingPipeline, TaskRun

BARE_LOOP = Path(__file__).resolve().parent / "p1_bare_loop.py"
MODELS = ("alexnet", "googlenet", "efficientnet_lite0")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32, help="loop batch = worker max batch")
    parser.add_argument("--chunk", type=int, default=32, help="items per task")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker-setting", action="append", default=[], metavar="NAME=VALUE",
                        help="a WorkerConfig field for the worker side, e.g. compile=off")
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "inferstream-bench-p1-data-path")
    parser.add_argument("--worker-log-dir", type=Path,
                        help="keep each model's worker-side log (threads, precision, compile, "
                             "decoding) as worker-<model>.log here")
    parser.add_argument("--model", help=argparse.SUPPRESS)  # the worker side's own process
    return parser.parse_args(argv)


def worker_settings(args: argparse.Namespace, model: str) -> WorkerConfig:
    fields: dict[str, Any] = {"models": (model,), "device": args.device,
                              "max_batch": args.batch, "random_weights": True}
    for pair in args.worker_setting:
        name, _, value = pair.partition("=")
        fields[name] = type(getattr(WorkerConfig(), name))(value)
    return Config(worker=WorkerConfig(**fields)).worker


async def run_tasks(pipeline: BatchingPipeline, images: list[bytes], chunk: int) -> float:
    """Every image through the pipeline as tasks of `chunk`; seconds to the last outcome."""
    loop = asyncio.get_running_loop()
    runs, left = [], asyncio.Event()
    pending = {"tasks": (len(images) + chunk - 1) // chunk}

    def done(run: TaskRun) -> None:
        pending["tasks"] -= 1
        if not pending["tasks"]:
            loop.call_soon_threadsafe(left.set)

    batch_loop = loop.create_task(pipeline.run_forever())
    started = time.perf_counter()
    for task_id, start in enumerate(range(0, len(images), chunk)):
        items: list[TaskItem] = [{"index": i, "name": f"img-{i}", "data": images[i]}
                                 for i in range(start, min(start + chunk, len(images)))]
        task: Task = {"job_id": "p1", "task_id": task_id, "attempt": 1, "pool": "bench",
                      "model": pipeline.model.name, "model_version": None, "top_k": 5,
                      "items": items,
                      "issued_at": 0, "deadline_ms": None, "home_partition": None}
        run = TaskRun(task, done)
        runs.append(run)
        pipeline.submit(run)
    await left.wait()
    seconds = time.perf_counter() - started
    batch_loop.cancel()
    errors = [o for r in runs for o in r.outcomes if o is None or o["status"] != ItemStatus.OK]
    if errors:
        raise SystemExit(f"{len(errors)} items failed, e.g. {errors[0]}")
    return seconds


def warm_pipeline(args: argparse.Namespace,
                  settings: WorkerConfig) -> tuple[BatchingPipeline, list[bytes]]:
    """`args.model` loaded as the worker loads it (its log on stderr), its pipeline run once
    on two batches of the photos; the pipeline and the photos."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s: %(message)s")
    model = model_loader(settings, args.device)(args.model)
    pipeline = BatchingPipeline(model, settings, WorkerHooks())
    images = [p.read_bytes() for p in image_paths(args)]
    asyncio.run(run_tasks(pipeline, images[: 2 * args.batch], args.chunk))  # warm-up
    return pipeline, images


def worker_side(args: argparse.Namespace) -> None:
    """In its own process (the worker's allocator is preloaded by its parent): load, warm up,
    run `--repeats` times; one JSON line of rates."""
    pipeline, images = warm_pipeline(args, worker_settings(args, args.model))
    rates = [len(images) / asyncio.run(run_tasks(pipeline, images, args.chunk))
             for _ in range(args.repeats)]
    pipeline.close()
    print(json.dumps({"rates": rates}))


def image_paths(args: argparse.Namespace) -> list[Path]:
    return make_images(args.workdir / f"images-{args.images}", args.images)


def child(argv: list[str], env: dict[str, str], log: Path | None = None) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env,
                          timeout=3600, check=False)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def bench(args: argparse.Namespace, model: str, listing: Path) -> dict[str, float]:
    loops: dict[str, list[float]] = {"plain": [], "tuned": []}
    for _ in range(args.repeats):
        for side in loops:
            env, threads = loop_env(side == "tuned", args.device, os.environ)
            loops[side].append(child(
                [str(BARE_LOOP), "--model", model, "--device", args.device, "--batch",
                 str(args.batch), "--threads", str(threads), "--warmup", str(args.batch),
                 "--list", str(listing)], env)["rate"])
    env = loop_env(True, args.device, os.environ)[0]  # the worker would re-exec so
    log = args.worker_log_dir / f"worker-{model}.log" if args.worker_log_dir else None
    worker = child([__file__, *sys.argv[1:], "--model", model], env, log)["rates"]
    return {"plain": max(loops["plain"]), "tuned": max(loops["tuned"]), "worker": max(worker)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.model:
        worker_side(args)
        return 0
    listing = args.workdir / "images.txt"
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text("\n".join(map(str, image_paths(args))) + "\n")
    print("| model | device | (a) plain loop img/s | (b) tuned loop img/s | worker data path "
          "img/s | vs (a) | vs (b) |\n|---|---|---:|---:|---:|---:|---:|")
    for model in args.models:
        r = bench(args, model, listing)
        print(f"| {model} | {args.device} | {r['plain']:.1f} | {r['tuned']:.1f} | "
              f"{r['worker']:.1f} | {r['worker'] / r['plain']:.2f} | "
              f"{r['worker'] / r['tuned']:.2f} |", flush=True)
    print(f"\nCommand: `{shlex.join(['python', 'ops/bench/p1_data_path.py', *sys.argv[1:]])}` "
          f"({args.images} images, batch {args.batch}, tasks of {args.chunk}, fastest of "
          f"{args.repeats}, {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
