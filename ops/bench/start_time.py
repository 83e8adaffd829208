#!/usr/bin/env python3
"""Worker start: cold (empty compile cache) and warm (the cache a previous start filled) to the
first batch, and the forward pass read from the cache against one compiled in this run.

Starts. Each start is a fresh process that does what `inferstream worker` does before it joins
its group (`serving.process.prepare_process`: allocator and threads; `serving.loader`: the
model built and its forward pass prepared, compiled or read from `--compile-cache-dir`) and
then runs its first batch: `--batch` JPEGs (the P1 photos) decoded and predicted. Timed from
the moment the process is spawned. Per model the starts alternate cold, warm, cold, warm...;
a cold start empties the cache first (Inductor's kernels and CPU probes too: a new machine).

Speed (`--speed`). In one process per model, side by side, alternating, fastest of `--rounds`:
the forward pass eager, as the worker compiled it before issue 26.4 (torch.compile, frozen and
prepacked, C++ wrapper), as compiled now in this process (the package built, cold), and as a
restarted worker reads it from the cache (warm); alone and next to one busy Python thread
(the worker's event loop and decode threads hold the GIL as it does).

    python ops/bench/start_time.py [--models M ...] [--runs 3] [--speed]

Prints Markdown tables and the command; `--workdir` keeps each start's log.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferstream.models import TorchModel
    from inferstream.models.packages import Forward

sys.path.insert(0, str(Path(__file__).resolve().parent))

from p1_cpu import machine_cpu_s
from p1_photos import make_images

MODELS = ("alexnet", "googlenet", "efficientnet_lite0")
REAL_WEIGHTS = ("efficientnet_lite0",)  # the others have none here: random (seeded) weights


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--runs", type=int, default=3, help="cold and warm starts per model")
    parser.add_argument("--batch", type=int, default=32, help="max batch = the first batch")
    parser.add_argument("--speed", action="store_true", help="also the forward pass's speed")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds of --speed")
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "inferstream-bench-start")
    parser.add_argument("--start", metavar="MODEL", help=argparse.SUPPRESS)  # one start
    parser.add_argument("--speed-of", metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def worker_settings(model: str, batch: int, cache: Path) -> Any:
    from inferstream.config import Config, WorkerConfig

    return Config(worker=WorkerConfig(
        models=(model,), device="cpu", max_batch=batch, compile_cache_dir=str(cache),
        random_weights=model not in REAL_WEIGHTS)).worker


def first_batch(args: argparse.Namespace) -> None:
    """One start, as the worker's; a JSON line of wall-clock times and what it logged."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("inferstream").addHandler(Keep())
    from inferstream.serving.loader import model_loader
    from inferstream.serving.process import prepare_process

    settings = worker_settings(args.start, args.batch, args.cache)
    device = prepare_process(settings)
    imported = time.time()
    model = model_loader(settings, device)(args.start)
    loaded = time.time()
    images = [p.read_bytes() for p in make_images(args.workdir / "images", args.batch)]
    predictions = model.predict_items([model.preprocess(data) for data in images], 1)
    done = time.time()
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    print(json.dumps({
        "imported": imported, "loaded": loaded, "first_batch": done, "log": lines,
        "cpu_s": sum(u.ru_utime + u.ru_stime for u in usage),
        "top1": [p[0][0] if isinstance(p, list) else p for p in predictions[:4]]}))


def start(args: argparse.Namespace, model: str, cache: Path, log: Path) -> dict[str, Any]:
    """One start in a fresh process; its times in seconds from the spawn."""
    busy, total = machine_cpu_s()
    spawned = time.time()
    proc = subprocess.run([sys.executable, __file__, "--start", model, "--cache", str(cache),
                           "--batch", str(args.batch), "--workdir", str(args.workdir)],
                          capture_output=True, text=True, timeout=1800, check=False)
    busy_after, total_after = machine_cpu_s()
    log.write_text(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"the start of {model} failed ({log}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    wall = result["first_batch"] - spawned
    other = max(0.0, (busy_after - busy) - result["cpu_s"]) / wall
    return {"to_first_batch": wall, "to_loaded": result["loaded"] - spawned,
            "load": result["loaded"] - result["imported"], "other_load": other,
            "top1": result["top1"], "log": result["log"], "cores": (total_after - total) / wall}


def starts(args: argparse.Namespace, model: str) -> dict[str, list[dict[str, Any]]]:
    """`--runs` cold and warm starts of `model`, alternating."""
    cache = args.workdir / f"cache-{model}"
    runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
    for run in range(args.runs):
        shutil.rmtree(cache, ignore_errors=True)
        for kind in runs:
            log = args.workdir / f"start-{model}-{kind}-{run + 1}.log"
            runs[kind].append(start(args, model, cache, log))
            print(f"  {model} {kind} {run + 1}: {runs[kind][-1]['to_first_batch']:.1f} s",
                  file=sys.stderr, flush=True)
    return runs


def start_rows(model: str, runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    rows = []
    for kind, results in runs.items():
        if not results:
            continue
        firsts = [r["to_first_batch"] for r in results]
        loads = [r["load"] for r in results]
        top1 = {tuple(r["top1"]) for r in results}
        rows.append(
            f"| {model} | {kind} | {statistics.median(firsts):.1f} | "
            f"{', '.join(f'{s:.1f}' for s in firsts)} | {statistics.median(loads):.1f} | "
            f"{max(r['other_load'] for r in results):.2f} | "
            f"{'same' if len(top1) == 1 else 'differ'} |")
    return rows


def forward_line(log: list[str]) -> str:
    return next((line for line in log if line.startswith("forward of")), "-")


def speed(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """ms per item of each forward pass, alone and next to a busy Python thread."""
    import torch

    from inferstream.models import TorchModel, load_model
    from inferstream.models.forward import prepare_forward

    torch.set_num_threads(os.cpu_count() or 1)
    name, cache = args.speed_of, str(args.cache)
    models = [load_model(name, random_weights=name not in REAL_WEIGHTS) for _ in range(2)]
    cold, warm = (m for m in models if isinstance(m, TorchModel))
    reports = [prepare_forward(m, compile_mode="on", max_batch=args.batch, cache_dir=cache)
               for m in (cold, warm)]
    assert reports[1].cached, reports[1].why  # noqa: S101 - the warm one must be read back
    forwards = {"eager": cold.module, "before": torch_compile_forward(cold, args.batch),
                "cold": cold.forward, "warm": warm.forward}
    images = [p.read_bytes() for p in make_images(args.workdir / "images", args.batch)]
    batch = torch.stack([cold.preprocess(data) for data in images])
    alone = time_forwards(cold, forwards, batch, args.rounds)
    with busy_python_thread():
        return {"alone": alone, "python": time_forwards(cold, forwards, batch, args.rounds)}


@contextlib.contextmanager
def busy_python_thread() -> Iterator[None]:
    """One thread running pure Python meanwhile, holding the GIL as the event loop does."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(20_000))

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def torch_compile_forward(model: TorchModel, max_batch: int) -> Forward:
    """The worker's compiled forward pass before issue 26.4 (models/forward.py of 8effa25):
    torch.compile with the C++ wrapper, freezing patched in while dynamo traces, every size
    class compiled through `predict` (the first call marks the batch dimension dynamic)."""
    import torch
    from torch._dynamo import maybe_mark_dynamic
    from torch._inductor import config as inductor_config

    from inferstream.models.collate import collate
    from inferstream.models.forward import warm_up_sizes

    compiled = torch.compile(model.module, options={"cpp_wrapper": True})

    def frozen(inputs: torch.Tensor) -> torch.Tensor:
        with inductor_config.patch(freezing=True):
            outputs: torch.Tensor = compiled(inputs)
        return outputs

    def first_call(inputs: torch.Tensor) -> torch.Tensor:
        maybe_mark_dynamic(inputs, 0)
        return frozen(inputs)

    item, kept = model.synthetic_item(), model.forward
    for position, size in enumerate(warm_up_sizes(max_batch)):
        model.forward = first_call if position == 0 else frozen
        model.predict(collate([item] * size), 1)
    model.forward = kept
    return frozen


def time_forwards(model: Any, forwards: dict[str, Any], batch: Any,
                  rounds: int) -> dict[str, float]:
    from inferstream.models.timing import best_seconds

    best = dict.fromkeys(forwards, float("inf"))
    for _ in range(rounds):
        for side, forward in forwards.items():
            model.forward = forward
            seconds = best_seconds(lambda: model.predict(batch, 1))
            best[side] = min(best[side], 1000 * seconds / len(batch))
    return best


def speed_rows(args: argparse.Namespace, model: str) -> list[str]:
    cache = args.workdir / f"speed-cache-{model}"
    shutil.rmtree(cache, ignore_errors=True)
    proc = subprocess.run([sys.executable, __file__, "--speed-of", model, "--cache", str(cache),
                           "--batch", str(args.batch), "--rounds", str(args.rounds),
                           "--workdir", str(args.workdir)],
                          capture_output=True, text=True, timeout=3600, check=False)
    (args.workdir / f"speed-{model}.log").write_text(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"the speed of {model} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return [f"| {model} | {background} | {r['eager']:.1f} | {r['before']:.1f} | "
            f"{r['cold']:.1f} | {r['warm']:.1f} | {r['warm'] / r['before']:.2f} |"
            for background, r in result.items()]


def report(args: argparse.Namespace, results: dict[str, dict[str, list[dict[str, Any]]]],
           speeds: list[str]) -> None:
    print("| model | start | to first batch s (median) | runs s | of which model load s "
          "(median) | other load, cores (max) | first 4 labels, every run |\n"
          "|---|---|---:|---|---:|---:|---|")
    for model, runs in results.items():
        print("\n".join(start_rows(model, runs)))
    print("\n| model | start | the worker's log line |\n|---|---|---|")
    for model, runs in results.items():
        for kind, kept in runs.items():
            if kept:
                print(f"| {model} | {kind} | `{forward_line(kept[-1]['log'])}` |")
    if speeds:
        print("\n| model | next to | eager ms/item | before (torch.compile) | cold (built now) "
              "| warm (from the cache) | warm / before |\n|---|---|---:|---:|---:|---:|---:|")
        print("\n".join(speeds))
    command = shlex.join(["python", "ops/bench/start_time.py", *sys.argv[1:]])
    print(f"\nCommand: `{command}` ({args.runs} cold and {args.runs} warm starts per model, "
          f"batch {args.batch}, {os.cpu_count()} cores)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.start:
        first_batch(args)
        return 0
    if args.speed_of:
        print(json.dumps(speed(args)))
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    make_images(args.workdir / "images", args.batch)
    results = {model: starts(args, model) for model in args.models}
    speeds = [row for model in args.models for row in speed_rows(args, model)] if args.speed \
        else []
    report(args, results, speeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
