"""Issue 30.6: Ray Data `map_batches` against inferstream, the same model on the same photos.

Both sides run the model as inferstream loads it (`models.registry.load_model`: the same
module, weights and preprocessing, so the work per image is the same) on `--images` JPEGs of
ops/bench/p1_photos.py. Ray Data reads the files (`read_binary_files`) and labels them in
`map_batches` with a pool of actors, each setting of `--settings` (actors x torch threads; every
actor holds one of Ray's CPUs and one is left to the read tasks, which are otherwise
backpressured for ever) timed from the dataset's execution to its last row, after a run of one
batch per actor that shows what starting the actors costs. inferstream runs a job of the same
paths on one local broker with a controller and one worker: warm (loaded and compiled, in its
group before the clock starts, as P8), restart (the clock starts with the worker's launch; its
compiled forward pass kept by the warm worker's start) and cold (launched with the clock, with
an empty compile cache). The sides alternate `--rounds` times; the fastest run of each counts.
Every photo's top-1 class is compared across the sides.

Ray runs in a venv of its own (`--ray-python`, never a project dependency):

    python -m venv var/peers/ray-venv
    lib=var/peers/ray-venv/lib/python3.11/site-packages
    printf '%s\n' "$PWD/.venv/lib/python3.11/site-packages" "$PWD/src" > $lib/zz-inferstream.pth
    var/peers/ray-venv/bin/pip install "ray[data]"

(the .pth lends it .venv's torch, torchvision and inferstream, so the versions are the same).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

if TYPE_CHECKING:  # imported where used: Ray's side of this script runs without inferstream
    from failover_common import Fleet

ROOT = Path(__file__).resolve().parents[2]
WORKER_ARGS = ["--max-batch", "32", "--max-wait-ms", "10", "--sysinfo-interval", "0"]


@dataclass(frozen=True)
class Run:
    """One side's run: seconds to the last output, each photo's top-1 class, what came before
    the first output (actors started, model loaded; Ray only), the rate after it,
    and the machine's load average when it ended."""

    side: str
    seconds: float
    top1: dict[str, int]
    startup_s: float | None = None
    steady_rate: float | None = None
    load: float = field(default_factory=lambda: os.getloadavg()[0])


def parse_settings(text: str) -> list[tuple[int, int]]:
    """`"1x2,2x1"` as [(actors, threads), ...]; ValueError for anything else."""
    settings = []
    for part in text.split(","):
        actors, sep, threads = part.strip().partition("x")
        if not sep or not actors.isdigit() or not threads.isdigit() or "0" in (actors, threads):
            raise ValueError(f"a setting is ACTORSxTHREADS, e.g. 1x2, not {part!r}")
        settings.append((int(actors), int(threads)))
    return settings


def top_class(output: object) -> tuple[int, str, float]:
    """The top-1 prediction (class id, label, score) of a classifier's output, as
    `LoadedModel.predict_items` gives it; ValueError for anything else (a bad item's reason)."""
    if not isinstance(output, list) or not output:
        raise ValueError(f"not a classifier's output: {output!r}")
    class_id, label, score = output[0]
    return int(class_id), str(label), float(score)


def agreement(first: dict[str, int], second: dict[str, int]) -> tuple[int, int]:
    """(photos with the same top-1 class, photos); ValueError where the photos differ."""
    if first.keys() != second.keys():
        missing = sorted(first.keys() ^ second.keys())
        raise ValueError(f"{len(missing)} photos labelled by one side only, e.g. {missing[0]}")
    return sum(1 for name, label in first.items() if second[name] == label), len(first)


def best(runs: list[Run], side: str) -> Run:
    """The fastest of `side`'s runs."""
    return min((r for r in runs if r.side == side), key=lambda r: r.seconds)


def ratio_table(runs: list[Run], reference: str, images: int) -> list[str]:
    """Markdown rows: each side's best run, its rate, the reference's rate over it, and its
    top-1 agreement with the reference."""
    ref = best(runs, reference)
    rows = [f"| side | to first output s | seconds | images/s | after the first output /s | "
            f"{reference} over it | top-1 agreement | load |", "|---|" + "---:|" * 7]
    for side in dict.fromkeys(r.side for r in runs):
        run = best(runs, side)
        same, total = agreement(ref.top1, run.top1)
        steady = "-" if run.steady_rate is None else f"{run.steady_rate:.1f}"
        startup = "-" if run.startup_s is None else f"{run.startup_s:.1f}"
        rows.append(f"| {side} | {startup} | {run.seconds:.1f} | "
                    f"{images / run.seconds:.1f} | {steady} | {run.seconds / ref.seconds:.2f} | "
                    f"{same}/{total} | {run.load:.1f} |")
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1200)
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--settings", type=parse_settings, default=parse_settings("1x1,1x2,2x1"),
                        help="Ray actors x torch threads per actor, comma-separated")
    parser.add_argument("--batch-size", type=int, default=32, help="Ray's map_batches size")
    parser.add_argument("--rounds", type=int, default=2, help="times the sides alternate")
    parser.add_argument("--no-cold", action="store_true", help="leave the cold worker out")
    parser.add_argument("--ray-python", type=Path,
                        default=ROOT / "var/peers/ray-venv/bin/python")
    parser.add_argument("--ray-side", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def ray_side(args: argparse.Namespace) -> None:
    """In Ray's venv: each setting on the photos listed in `--ray-side`; one JSON line each."""
    ray = importlib.import_module("ray")  # only in Ray's own venv

    paths = args.ray_side.read_text().split()
    started = time.monotonic()
    ray.init(num_cpus=max(a for a, _ in args.settings) + 1, include_dashboard=False,
             log_to_driver=False)
    print(json.dumps({"init_s": time.monotonic() - started}), flush=True)
    for actors, threads in args.settings:
        print(json.dumps({"setting": f"{actors}x{threads}",
                          **_ray_run(args, paths, actors, threads)}), flush=True)


def _ray_run(args: argparse.Namespace, paths: list[str], actors: int,
             threads: int) -> dict[str, Any]:
    """Seconds to the first row and to the last, rows in the first batch, top-1 by photo."""
    import numpy as np
    import torch
    ray_data = importlib.import_module("ray.data")

    from inferstream.models.registry import load_model

    class Labeller:
        def __init__(self) -> None:
            torch.set_num_threads(threads)
            self.model = load_model(args.model)

        def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
            items = [self.model.preprocess(data) for data in batch["bytes"]]
            outputs = self.model.predict_items(items, 1)
            return {"path": batch["path"], "top1": np.array([top_class(o)[0] for o in outputs])}

    started = time.monotonic()
    dataset = ray_data.read_binary_files(paths, include_paths=True).map_batches(
        Labeller, concurrency=actors, num_cpus=1, batch_size=args.batch_size)
    top1: dict[str, int] = {}
    first_s, first_rows = 0.0, 0
    for batch in dataset.iter_batches(batch_size=None):
        if not top1:
            first_s, first_rows = time.monotonic() - started, len(batch["path"])
        top1.update({Path(p).name: int(c) for p, c in zip(batch["path"], batch["top1"],
                                                          strict=True)})
    return {"seconds": time.monotonic() - started, "first_s": first_s,
            "first_rows": first_rows, "top1": top1}


def run_ray(args: argparse.Namespace, listing: Path) -> tuple[list[Run], float]:
    """Every setting in a fresh Ray (its own venv); the runs and the seconds ray.init took."""
    out = subprocess.run([str(args.ray_python), __file__, "--ray-side", str(listing),
                          "--model", args.model, "--batch-size", str(args.batch_size),
                          "--settings", ",".join(f"{a}x{t}" for a, t in args.settings)],
                         capture_output=True, text=True, check=False)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"Ray exited with {out.returncode}:\n{out.stderr[-3000:]}")
    init_s = lines[0]["init_s"]
    runs = [Run(f"Ray Data {r['setting']}", r["seconds"], r["top1"], r["first_s"],
                (len(r["top1"]) - r["first_rows"]) / (r["seconds"] - r["first_s"]))
            for r in lines[1:]]
    for run in runs:
        print(f"{run.side}: {run.seconds:.1f} s, first output at {run.startup_s:.1f} s, "
              f"ray.init {init_s:.1f} s, load {run.load:.1f}", flush=True)
    return runs, init_s


def run_inferstream(bootstrap: str, logdir: Path, images: list[Path], model: str,
                    mode: str) -> Run:
    """One job of `images` with a controller and one worker, by `mode`: warm (compiled and in
    its group before the clock starts), restart (launched with the clock, its compiled forward
    pass kept by an earlier start) or cold (launched with the clock, compiling into an empty
    cache: in the background while it serves eager, where the code has that)."""
    from failover_common import Fleet

    from inferstream.client import JobStatus

    fleet = Fleet(bootstrap, 4, logdir, f"peer-{mode}")
    try:
        fleet.create_topics()
        fleet.start("controller", "controller")
        cache = tempfile.mkdtemp(dir=logdir) if mode == "cold" else str(logdir / "compiled")
        worker_args = [*WORKER_ARGS, "--compile-cache-dir", cache]
        if mode == "warm":
            start_compiled(fleet, model, worker_args)
        started = time.monotonic()
        job = fleet.client.submit(model, [str(p) for p in images], top_k=1)
        if mode != "warm":
            fleet.worker("w1", model, *worker_args)
        first: list[float] = []  # seconds to the job's first result, as its events tell

        def progressed(status: JobStatus) -> None:
            if status.done_items and not first:
                first.append(time.monotonic() - started)

        job.wait(timeout_s=3600, on_progress=progressed)
        seconds = time.monotonic() - started
        top1 = {Path(line["item"]).name: line["top_k"][0]["class_id"] for line in job.results()
                if line["status"] == "ok"}
        print(f"inferstream {mode}: {seconds:.1f} s, first result at {first[0]:.1f} s, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        print_forward_lines(fleet.log_path("w1"))
        return Run(f"inferstream {mode}", seconds, top1, first[0])
    finally:
        fleet.stop_all()


def start_compiled(fleet: Fleet, model: str, worker_args: list[str]) -> None:
    """Start worker w1 compiled and in its group: it waits for its compile (an environment
    setting, which code from before compile_background ignores)."""
    from failover_common import wait_for_group

    os.environ["INFERSTREAM_WORKER_COMPILE_BACKGROUND"] = "off"
    fleet.worker("w1", model, *worker_args)
    del os.environ["INFERSTREAM_WORKER_COMPILE_BACKGROUND"]
    wait_for_group(fleet, ["w1"], timeout_s=600)


def print_forward_lines(log: Path) -> None:
    """The worker's `forward of` lines: compiled or eager, and from when."""
    for line in log.read_text(errors="replace").splitlines():
        if "forward of" in line:
            print(f"  {line[line.index('forward of'):]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.ray_side is not None:
        ray_side(args)
        return 0
    from failover_common import source_version, start_broker
    from p1_photos import make_images

    runs: list[Run] = []
    inits: list[float] = []
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        images = make_images(Path(tmp) / "images", args.images)
        listing = Path(tmp) / "listing.txt"
        listing.write_text("\n".join(map(str, images)))
        broker = start_broker(Path(tmp) / "kafka")
        try:
            for _ in range(args.rounds):
                runs.append(run_inferstream(broker.bootstrap, Path(tmp), images, args.model,
                                            "warm"))
                ray_runs, init_s = run_ray(args, listing)
                runs.extend(ray_runs)
                inits.append(init_s)
            for mode in () if args.no_cold else ("restart", "cold"):
                runs.append(run_inferstream(broker.bootstrap, Path(tmp), images, args.model,
                                            mode))
        finally:
            broker.clean()
    print(f"\nRay Data against inferstream at {source_version()}: {args.images} JPEGs "
          f"(ops/bench/p1_photos.py), {args.model}, Ray batch {args.batch_size}, best of "
          f"{args.rounds} alternating rounds\n")
    print("\n".join(ratio_table(runs, "inferstream warm", args.images)))
    print(f"\nray.init (before any run; not in the seconds above): {min(inits):.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
