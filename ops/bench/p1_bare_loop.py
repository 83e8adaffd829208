"""The baseline of benchmark P1: a hand-written single-process PyTorch loop.

Reads each file, decodes and preprocesses it with the model's own transform (the one the
worker uses), stacks `--batch` images and runs the forward pass under `torch.inference_mode`,
then softmax and top-5 as the worker does. Nothing overlaps: read, decode and forward take
turns; eager, float32, contiguous: the loop a user would write. Prints one JSON object with
the timings. Run by `p1_pipeline.py` in a fresh process, as it is (the plain loop) or with the
worker's allocator and thread count (the tuned loop).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from inferstream.models import load_model
from inferstream.models.threads import plan_threads
from inferstream.serving.allocator import choose

sys.path.insert(0, str(Path(__file__).resolve().parent))
from p1_cpu import CpuMeter

TOP_K = 5
#: what the plain loop's environment must not inherit from the shell that runs a benchmark
TUNING_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD", "MALLOC_CONF")


def loop_env(tuned: bool, device: str, environ: Mapping[str, str],
             extra: Mapping[str, str] | None = None) -> tuple[dict[str, str], int]:
    """The environment to run this loop in, and its `--threads` (0: torch's default): plain,
    as a user's shell runs it (`environ` without tuning variables, plus `extra`), or tuned,
    with the allocator the worker's `--allocator auto` preloads and the worker's torch
    threads on `device`."""
    plain = {k: v for k, v in environ.items() if k not in TUNING_ENV} | dict(extra or {})
    if not tuned:
        return plain, 0
    threads = plan_threads(device).torch_threads
    return {**(choose("auto", plain).env or plain), "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads)}, threads


def _forward(module: torch.nn.Module, batch: torch.Tensor) -> list[list[int]]:
    with torch.inference_mode():
        logits = module(batch)
        _, ids = torch.softmax(logits.float(), dim=1).topk(TOP_K, dim=1)
        top: list[list[int]] = ids.tolist()
    return top


def run(model_name: str, paths: list[str], batch_size: int, warmup: int,
        device: str = "cpu") -> dict[str, Any]:
    """Classify `paths` in batches on `device`; the first `warmup` images are run once before
    timing."""
    model = load_model(model_name, device=device, random_weights=True)
    module: torch.nn.Module = model.module  # type: ignore[attr-defined]
    if warmup:
        _forward(module, torch.stack([model.preprocess(Path(p).read_bytes())
                                      for p in paths[:warmup]]).to(device))
    spent = {"read_s": 0.0, "decode_s": 0.0, "forward_s": 0.0}
    before, wall0 = CpuMeter().snapshot(), time.perf_counter()
    for start in range(0, len(paths), batch_size):
        tensors = []
        for path in paths[start:start + batch_size]:
            t0 = time.perf_counter()
            data = Path(path).read_bytes()
            t1 = time.perf_counter()
            tensors.append(model.preprocess(data))
            t2 = time.perf_counter()
            spent["read_s"] += t1 - t0
            spent["decode_s"] += t2 - t1
        t2 = time.perf_counter()
        _forward(module, torch.stack(tensors).to(device))  # top-k's tolist() waits for it
        spent["forward_s"] += time.perf_counter() - t2
    wall = time.perf_counter() - wall0
    cpu = CpuMeter.delta(before, CpuMeter().snapshot())
    return {"images": len(paths), "wall_s": wall, "rate": len(paths) / wall,
            "torch_threads": torch.get_num_threads(), "cpu": cpu, **spent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (0: torch's default, every core)")
    parser.add_argument("--warmup", type=int, default=0, help="images to run before timing")
    parser.add_argument("--list", required=True, help="file naming one image per line")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    paths = Path(args.list).read_text().split()
    print(json.dumps(run(args.model, paths, args.batch, args.warmup, args.device)))


if __name__ == "__main__":
    main()
