#!/usr/bin/env python3
"""Benchmark: efficientnet_lite0 as a repository model against the built-in, on P1's data path.

The repository model is the built-in module with its real weights, saved with torch.export
(`model.pt2`, a dynamic batch dimension) beside a card that holds the built-in's preprocessing
(256, centre 224, bicubic, (x - 127) / 128) and ImageNet's labels. Each side runs as
`p1_data_path.py`'s worker side does (the worker's loader and `BatchingPipeline`, tasks of
`--chunk` P1 photos from memory, the worker's allocator and torch threads), each run a fresh
process, alternating built-in and repository model for every `--compile` mode in turn, same
batch and threads. Both sides share one compile cache in `--workdir` (the first run of a side
with compile auto or on builds its package).

    python ops/bench/repository_p1.py [--images N] [--repeats N] [--compile auto off]

Prints one Markdown table (items/s of the fastest and the median run, every run's with [the
cores other processes used during it], the ratios repository / built-in, the forward line of
each side's log), the forward pass alone of both models in one process, and the command.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import os
import shlex
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from p1_bare_loop import loop_env
from p1_cpu import CpuMeter, wait_for_quiet
from p1_data_path import child, image_paths, run_tasks, warm_pipeline

from inferstream.config import Config, WorkerConfig
from inferstream.models import TorchModel, imagenet_labels, load_model
from inferstream.models.collate import collate
from inferstream.models.timing import best_seconds
from inferstream.serving.loader import model_loader

BUILTIN = "efficientnet_lite0"
#: the repository model's name (a built-in's is refused)
REPOSITORY = "lite0"
CARD = (f"[input]\nsize = [224, 224]\nresize = 256\ninterpolation = \"bicubic\"\n"
        f"mean = [{127 / 255!r}, {127 / 255!r}, {127 / 255!r}]\n"
        f"std = [{128 / 255!r}, {128 / 255!r}, {128 / 255!r}]\n"
        "[output]\nkind = \"classification\"\n")
#: items whose top-1 each side reports, so that the table says the two models are one
CHECKED = 16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32, help="the worker's max batch")
    parser.add_argument("--chunk", type=int, default=32, help="items per task")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side and mode")
    parser.add_argument("--compile", nargs="+", default=["auto", "off"],
                        choices=["auto", "on", "off"], help="the modes compared, in turn")
    parser.add_argument("--quiet-wait", type=float, default=20.0, metavar="SECONDS",
                        help="before each run, wait up to this long for the machine to idle")
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "inferstream-bench-repository")
    parser.add_argument("--model", help=argparse.SUPPRESS)  # a side's own process
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--forward", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def make_repository(root: Path, device: str) -> None:
    """The built-in efficientnet_lite0 with its weights, exported as model REPOSITORY."""
    folder = root / REPOSITORY
    if (folder / "1" / "model.pt2").is_file():
        return
    model = load_model(BUILTIN, device=device)
    if not isinstance(model, TorchModel):
        raise SystemExit(f"{BUILTIN} is not a torch model here")
    example = torch.rand(2, 3, 224, 224, device=device)
    program = torch.export.export(model.module, (example,),
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    out = io.BytesIO()
    torch.export.save(program, out)
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "model.toml").write_text(CARD, encoding="utf-8")
    (folder / "labels.txt").write_text("\n".join(imagenet_labels()) + "\n", encoding="utf-8")
    (folder / "1" / "model.pt2").write_bytes(out.getvalue())


def side_settings(args: argparse.Namespace, model: str) -> WorkerConfig:
    return Config(worker=WorkerConfig(
        models=(model,), device=args.device, max_batch=args.batch, compile=args.mode,
        model_repository=str(args.workdir / "repo"),
        compile_cache_dir=str(args.workdir / "compile-cache"))).worker


def side(args: argparse.Namespace) -> None:
    """In its own process: load the model as a worker does, warm up, one timed run; one JSON
    line: the rate, the cores other processes used meanwhile and the top-1 of the first
    CHECKED photos."""
    pipeline, images = warm_pipeline(args, side_settings(args, args.model))
    wait_for_quiet(args.quiet_wait)
    before = CpuMeter().snapshot()
    seconds = asyncio.run(run_tasks(pipeline, images, args.chunk))
    spent = CpuMeter.delta(before, CpuMeter().snapshot())
    pipeline.close()
    model = pipeline.model
    answers = model.predict(collate([model.preprocess(i) for i in images[:CHECKED]]), 1)
    print(json.dumps({"rate": len(images) / seconds,
                      "other_cores": (spent["machine_busy"] - spent["self"]) / seconds,
                      "top1": [a[0][0] if isinstance(a, list) else None for a in answers]}))


def forward_side(args: argparse.Namespace) -> None:
    """In its own process: both models loaded as a worker loads them, then each one's
    `predict` on one batch of P1 photos, alternated `--repeats` times; one JSON line: the
    fastest ms per item of each."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s: %(message)s")
    models = [model_loader(side_settings(args, name), args.device)(name)
              for name in (BUILTIN, REPOSITORY)]
    images = [p.read_bytes() for p in image_paths(args)[: args.batch]]
    batches = [collate([m.preprocess(i) for i in images]) for m in models]
    if not torch.equal(batches[0], batches[1]):
        raise SystemExit("the two sides preprocessed the photos differently")
    best = [float("inf")] * len(models)
    for _ in range(args.repeats):
        for i, model in enumerate(models):
            wait_for_quiet(args.quiet_wait)
            seconds = best_seconds(partial(model.predict, batches[0], 5), repeats=5)
            best[i] = min(best[i], 1000 * seconds / args.batch)
    print(json.dumps({"ms": best}))


def forward_line(log: Path) -> str:
    lines = [line for line in log.read_text().splitlines() if ": forward of " in line]
    return lines[-1].split(": forward of ", 1)[1] if lines else "?"


def run_side(args: argparse.Namespace, model: str, mode: str, run: int) -> dict[str, Any]:
    env = loop_env(True, args.device, os.environ)[0]  # the worker would re-exec so
    log = args.workdir / "logs" / f"{model}-{mode}-{run}.log"
    result = child([__file__, *sys.argv[1:], "--model", model, "--mode", mode], env, log)
    return {**result, "forward": forward_line(log)}


def pipeline_row(args: argparse.Namespace, mode: str) -> str:
    """The table's row of compile `mode`: each side `--repeats` times, alternated."""
    runs: dict[str, list[dict[str, Any]]] = {BUILTIN: [], REPOSITORY: []}
    for run in range(args.repeats):
        for model in runs:
            runs[model].append(run_side(args, model, mode, run))
    tops = {tuple(r["top1"]) for side_runs in runs.values() for r in side_runs}
    if len(tops) != 1:
        raise SystemExit(f"the two sides labelled the photos differently: {tops}")
    rates = {model: [r["rate"] for r in side_runs] for model, side_runs in runs.items()}
    fastest = {model: max(side_rates) for model, side_rates in rates.items()}
    median = {model: statistics.median(side_rates) for model, side_rates in rates.items()}
    every = {model: ", ".join(f"{r['rate']:.1f} [{r['other_cores']:.1f}]" for r in side_runs)
             for model, side_runs in runs.items()}
    cells = [f"{fastest[m]:.1f} / {median[m]:.1f} ({every[m]})" for m in runs]
    return (f"| {mode} | {cells[0]} | {cells[1]} | {fastest[REPOSITORY] / fastest[BUILTIN]:.3f}"
            f" / {median[REPOSITORY] / median[BUILTIN]:.3f} | {runs[BUILTIN][0]['forward']} | "
            f"{runs[REPOSITORY][0]['forward']} |")


def forward_row(args: argparse.Namespace, mode: str) -> str:
    """The forward table's row of compile `mode`, from one process holding both models."""
    env = loop_env(True, args.device, os.environ)[0]
    log = args.workdir / "logs" / f"forward-{mode}.log"
    builtin, repository = child([__file__, *sys.argv[1:], "--forward", "--mode", mode], env,
                                log)["ms"]
    return f"| {mode} | {builtin:.2f} | {repository:.2f} | {builtin / repository:.3f} |"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.model:
        side(args)
        return 0
    if args.forward:
        forward_side(args)
        return 0
    make_repository(args.workdir / "repo", args.device)
    image_paths(args)
    print("| compile | built-in items/s, fastest / median (runs) | repository items/s, fastest "
          "/ median (runs) | repository / built-in, fastest / median | built-in forward | "
          "repository forward |\n|---|---:|---:|---:|---|---|")
    for mode in args.compile:
        print(pipeline_row(args, mode), flush=True)
    print(f"\nThe forward pass alone (`predict` on one batch of {args.batch} photos, both "
          "models in one process, alternated):\n\n| compile | built-in ms/item | repository "
          "ms/item | repository speed / built-in |\n|---|---:|---:|---:|")
    for mode in args.compile:
        print(forward_row(args, mode), flush=True)
    print(f"\nCommand: `{shlex.join(['python', 'ops/bench/repository_p1.py', *sys.argv[1:]])}` "
          f"({args.images} images, batch {args.batch}, tasks of {args.chunk}, fastest of "
          f"{args.repeats} alternated, {os.cpu_count()} cores, device {args.device}; "
          f"the same top-1 for the first {CHECKED} photos on both sides in every run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
