#!/usr/bin/env python3
"""Why a forward pass runs slower inside the worker: CPU sharing and the GIL, in one process.

Runs the model's forward pass on an inference thread, as the worker does, while background
threads either decode images (as the worker's decode pool does) or run pure Python (as the
worker's event loop does when it decodes Avro and commits), and reports the forward time
per image and how much of the machine stayed idle meanwhile.

    .venv/bin/python ops/bench/p1_contention.py --model efficientnet_lite0 --background python
    ... --switch-interval 0.0005     # a shorter GIL switch interval
    ... --graph                      # a TorchScript-frozen forward, which runs without the GIL
    ... --forward compiled           # the worker's compiled forward pass (models/forward.py)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from p1_cpu import machine_cpu_s
from p1_photos import make_images

from inferstream.models import LoadedModel, TorchModel, load_model
from inferstream.models.forward import prepare_forward


def _background(kind: str, count: int, preprocess: Callable[[bytes], torch.Tensor],
                images: list[bytes], stop: threading.Event) -> list[threading.Thread]:
    def decode() -> None:
        i = 0
        while not stop.is_set():
            preprocess(images[i % len(images)])
            i += 1

    def python() -> None:
        while not stop.is_set():
            sum(range(20_000))  # holds the GIL, like pure-Python work on the event loop

    target = {"decode": decode, "python": python}.get(kind)
    threads = [threading.Thread(target=target, daemon=True) for _ in range(count if target else 0)]
    for thread in threads:
        thread.start()
    return threads


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--background", choices=["none", "decode", "python"], default="none")
    parser.add_argument("--background-threads", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=4, help="timed forward passes")
    parser.add_argument("--switch-interval", type=float, help="sys.setswitchinterval (s)")
    parser.add_argument("--graph", action="store_true", help="TorchScript trace + freeze")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                        help="of the worker's forward pass (--forward eager or compiled)")
    parser.add_argument("--forward", choices=["plain", "eager", "compiled"], default="plain",
                        help="plain: the module as loaded (float32, contiguous); eager and "
                        "compiled: the worker's forward pass with --compile off or on (float32, "
                        "channels-last)")
    return parser.parse_args()


def forward_of(args: argparse.Namespace, model: LoadedModel, batch: torch.Tensor
               ) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
    """The forward pass `--forward` and `--graph` ask for, and the batch it takes."""
    module: Callable[[torch.Tensor], torch.Tensor] = model.module  # type: ignore[attr-defined]
    if args.forward != "plain":
        assert isinstance(model, TorchModel)  # noqa: S101 - registry models are
        prepare_forward(model, compile_mode="on" if args.forward == "compiled" else "off",
                        max_batch=args.batch, torch_threads=args.threads,
                        precision=args.precision)
        module, batch = model.forward, model.to_inputs(batch)
    if args.graph:
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")
            module = torch.jit.freeze(torch.jit.trace(module, batch))  # type: ignore[no-untyped-call]
    return module, batch


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    model = load_model(args.model, random_weights=True)
    workdir = Path(tempfile.gettempdir()) / "inferstream-bench-p1"
    images = [p.read_bytes() for p in make_images(workdir / "images-64-seed0", 64)]
    module, batch = forward_of(args, model, torch.stack(
        [model.preprocess(b) for b in images[: args.batch]]))

    def forward() -> None:
        with torch.inference_mode():
            module(batch)

    inference = ThreadPoolExecutor(1, "infer")
    for _ in range(2):  # warm-up
        inference.submit(forward).result()
    stop = threading.Event()
    threads = _background(args.background, args.background_threads, model.preprocess, images,
                          stop)
    time.sleep(0.2)
    busy0, total0 = machine_cpu_s()
    started = time.perf_counter()
    for _ in range(args.batches):
        inference.submit(forward).result()
    seconds = time.perf_counter() - started
    busy1, total1 = machine_cpu_s()
    stop.set()
    for thread in threads:
        thread.join()
    idle = 1 - (busy1 - busy0) / (total1 - total0)
    print(f"{args.model} background={args.background}x{len(threads)} graph={args.graph} "
          f"forward={args.forward} precision={args.precision} "
          f"switch={sys.getswitchinterval()}: forward "
          f"{1000 * seconds / (args.batches * args.batch):.1f} ms/img, machine idle {idle:.0%}")


if __name__ == "__main__":
    main()
