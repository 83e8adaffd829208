"""Benchmark: several tasks of a partition in one transaction (issue 30.4), old code beside new.

On one local broker (started by ops/kafka/cluster), each run starts a controller and one
worker process with `--members M` on `--model` (default `sim:ms=0`: no compute, what is left
is the Kafka path) under a topic prefix of its own, and takes one job of `--items` items in tasks of
`--chunk-size`. The variants alternate run by run, each round starting with the next one, so
that the machine's load, shared with other sessions, falls on each alike, after a job of
`--warmup-items` that is not counted (a fresh broker's first transactions and offset commits
create its internal topics and warm its JIT: the first run cost the broker 1.6-2x). `base`
runs the code of `--base-src` (e.g. a `git worktree` of the commit before, its `src/` put
first on PYTHONPATH), `window N ms` this tree's code with `--commit-window-ms N`. Reported
per run: items/s (submission to COMPLETED), the broker's CPU per item (its JVM's
/proc/PID/stat utime + stime across the job, the broker's fetches and heartbeats included, so
a shorter job costs less of them), the worker's transactions (its commit-duration count) per
task, the broker's CPU per worker transaction, every item exactly once
(tests/chaos/verifier.py) and the load average.

    .venv/bin/python ops/bench/commit_batching.py --base-src /tmp/commits-base/src \\
        [--items 20000] [--chunk-size 16] [--members 8] [--rounds 3] [--windows-ms 0 10]
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from failover_common import Fleet, source_version, start_broker
from p1_stack import BenchError, free_port
from scale_study import members_owning, transactions
from secure_throughput import cpu_s
from tests.chaos.verifier import ResultsReader, verify

from inferstream.client.client import Client


@dataclass(frozen=True)
class Variant:
    """What a run runs: the code of `src` (None: this tree's) with `flags` for the worker."""

    name: str
    src: str | None
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Run:
    """One job's figures."""

    variant: str
    items: int
    tasks: int
    seconds: float
    broker_cpu_s: float
    worker_transactions: int
    exactly_once: bool
    load: float

    @property
    def rate(self) -> float:
        return self.items / self.seconds

    @property
    def broker_us_per_item(self) -> float:
        return self.broker_cpu_s * 1e6 / self.items


class CodeFleet(Fleet):
    """A controller and a worker process running the code of `src` (None: this tree's)."""

    def __init__(self, bootstrap: str, task_partitions: int, logdir: Path, tag: str,
                 src: str | None) -> None:
        super().__init__(bootstrap, 12, logdir, tag)
        self.config = replace(self.config, task_partitions=task_partitions)
        self.client = Client(self.config)
        self.src = src

    def _env(self) -> dict[str, str]:
        env = super()._env()
        if self.src is not None:  # ahead of the venv's editable install of this tree
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [self.src,
                                                              env.get("PYTHONPATH")]))
        return env


def start_pool(fleet: CodeFleet, variant: Variant, model: str, members: int,
               timeout_s: float = 600) -> dict[str, int]:
    """Start the controller and the worker; wait until every member owns partitions.
    Returns the metrics port of each."""
    ports = {"controller": free_port(), "w": free_port()}
    fleet.start("controller", "controller", "--metrics-port", str(ports["controller"]))
    fleet.worker("w", model, "--members", str(members), "--metrics-port", str(ports["w"]),
                 *variant.flags)
    deadline = time.monotonic() + timeout_s
    while members_owning(fleet, ["w"]) < members:
        fleet.check_alive("controller", "w")
        if time.monotonic() > deadline:
            raise BenchError(f"the {members} members never all owned partitions")
        time.sleep(1)
    time.sleep(2)  # the last assignments settle
    return ports


def run_job(fleet: CodeFleet, variant: Variant, broker_pid: int, ports: dict[str, int],
            args: argparse.Namespace) -> Run:
    """One job of `args.items` items on the started pool, checked exactly once."""
    listing = fleet.logdir / f"{fleet.config.topic_prefix}items.txt"
    listing.write_text("".join(f"cb-{i:07d}\n" for i in range(args.items)))
    reader = ResultsReader(fleet.config).start()
    worker_port = {"w": ports["w"]}
    load = os.getloadavg()[0]
    cpu_before, txns_before = cpu_s(broker_pid), transactions(worker_port)
    started = time.monotonic()
    job = fleet.client.submit(args.model, [f"@{listing}"], chunk_size=args.chunk_size)
    status = job.wait(timeout_s=args.job_timeout_s)
    seconds = time.monotonic() - started
    cpu_after, txns_after = cpu_s(broker_pid), transactions(worker_port)
    reader.read_to_end(timeout_s=120)
    expected = listing.read_text().splitlines()
    report = verify(job.job_id, expected, reader.snapshot(), list(job.results()))
    reader.close()
    return Run(variant.name, args.items, math.ceil(args.items / args.chunk_size), seconds,
               cpu_after - cpu_before, txns_after - txns_before,
               not report.problems() and status.ok_items == args.items,
               (load + os.getloadavg()[0]) / 2)


def one_run(bootstrap: str, broker_pid: int, variant: Variant, args: argparse.Namespace,
            workdir: Path, index: int) -> Run:
    fleet = CodeFleet(bootstrap, args.task_partitions, workdir, f"cb{index}", variant.src)
    try:
        fleet.create_topics()
        ports = start_pool(fleet, variant, args.model, args.members)
        return run_job(fleet, variant, broker_pid, ports, args)
    finally:
        fleet.stop_all()


def variants(args: argparse.Namespace) -> list[Variant]:
    found = [Variant("base", args.base_src)] if args.base_src else []
    return found + [Variant(f"window {ms:g} ms", None, ("--commit-window-ms", f"{ms:g}"))
                    for ms in args.windows_ms]


def schedule(order: list[Variant], rounds: int) -> list[Variant]:
    """Every variant once a round, each round starting with the next one."""
    return [order[(start + i) % len(order)] for start in range(rounds)
            for i in range(len(order))]


def row(run: Run) -> str:
    per_txn = (f"{run.broker_cpu_s * 1000 / run.worker_transactions:.1f}"
               if run.worker_transactions else "")
    return (f"| {run.variant} | {run.rate:,.0f} | {run.seconds:.1f} | "
            f"{run.broker_us_per_item:.0f} | {run.worker_transactions / run.tasks:.2f} | "
            f"{per_txn} | {'yes' if run.exactly_once else 'NO'} | {run.load:.1f} |")


HEADER = ("| variant | items/s | s | broker CPU us per item | worker transactions per task | "
          "broker CPU ms per worker transaction | exactly once | load |\n"
          "|---|---:|---:|---:|---:|---:|---|---:|")


def summary(runs: list[Run]) -> str:
    """Median items/s and broker CPU per item of each variant."""
    lines = ["| variant | runs | median items/s | median broker CPU us per item |",
             "|---|---:|---:|---:|"]
    for name in dict.fromkeys(run.variant for run in runs):
        mine = [run for run in runs if run.variant == name]
        lines.append(f"| {name} | {len(mine)} | "
                     f"{statistics.median(r.rate for r in mine):,.0f} | "
                     f"{statistics.median(r.broker_us_per_item for r in mine):.0f} |")
    return "\n".join(lines)


def run(args: argparse.Namespace, workdir: Path) -> list[Run]:
    broker = start_broker(workdir / "kafka")
    try:
        broker_pid = broker.pid()
        if broker_pid is None:
            raise BenchError("the broker has no process")
        order = variants(args)
        if args.warmup_items:
            warmup = argparse.Namespace(**{**vars(args), "items": args.warmup_items})
            warm = one_run(broker.bootstrap, broker_pid, order[-1], warmup, workdir, 0)
            print(f"(warm-up, not counted) {row(warm)}", flush=True)
        runs: list[Run] = []
        print(HEADER, flush=True)
        for variant in schedule(order, args.rounds):
            runs.append(one_run(broker.bootstrap, broker_pid, variant, args, workdir,
                                len(runs) + 1))
            print(row(runs[-1]), flush=True)
        return runs
    finally:
        broker.clean()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ops/bench/commit_batching.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-src", default="",
                        help="the src/ folder of the code to compare with (empty: none)")
    parser.add_argument("--windows-ms", type=float, nargs="+", default=[10.0],
                        help="commit windows of this tree's worker, one variant each")
    parser.add_argument("--model", default="sim:ms=0")
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--chunk-size", type=int, default=16, help="items per task")
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--task-partitions", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each variant")
    parser.add_argument("--warmup-items", type=int, default=5_000,
                        help="items of the job run first and not counted (0: none)")
    parser.add_argument("--job-timeout-s", type=float, default=600)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[Run]:
    given = sys.argv[1:] if argv is None else argv
    args = parse_args(given)
    print(f"# {shlex.join(['ops/bench/commit_batching.py', *given])} at {source_version()}, "
          f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="commit-batching-") as tmp:
        runs = run(args, Path(tmp))
    print()
    print(summary(runs))
    return runs


if __name__ == "__main__":
    main()
