"""Benchmark: a worker whose decoding sets its pace, beside one whose model does (2026-12-06).

One local broker, a sysinfo app, a controller (defaults: pacing, migration, the policy's task
sizes) and two workers with 2 decode threads each:

- `wd`: `sim:ms=1,decode_ms=20`: each item sleeps 20 ms in its decode and 1 ms in the forward
  pass, so the worker does about 100 items/s (2 decode threads) while its forward pass alone
  could do 1,000;
- `wc`: `sim:ms=5`: 200 items/s, set by its forward pass.

A warm-up job of `--warmup-s` seconds of the pair's capacity (300 items/s) gives the policy its
busy samples of both; once the partitions have not moved for 5 s, the measured job of
`--ideal-s` seconds runs from submission to COMPLETED. Reported: makespan over the ideal
(items / 300 items/s), each worker's share of the results (ideal 0.33 / 0.67), the measured
job's tasks re-issued (the controller's log), the lost and duplicate items of the committed
results, and the rates the policy table held for each worker at the end. Each source tree
of `--src` (its `src` folder, by PYTHONPATH; none: this tree) runs on its own topic prefix,
alternated over `--rounds`.

    python ops/bench/decode_bound.py --src /tmp/base/src --src src --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from committed import CommittedResults, audit
from failover_common import (
    source_version,
    start_broker,
    wait_for_group,
    write_listing,
)
from healthy_reissues import HERE, TreeFleet
from p1_stack import BenchError

#: worker -> (model, items/s it can do: what sets the ideal)
WORKERS = {"wd": ("sim:ms=1,decode_ms=20", 100.0), "wc": ("sim:ms=5", 200.0)}
CAPACITY = sum(rate for _, rate in WORKERS.values())


@dataclass(frozen=True)
class Row:
    src: Path
    round: int
    items: int
    makespan_s: float
    shares: dict[str, float]
    reissued: int
    lost_items: int
    duplicate_records: int
    #: worker -> (capacity items/s, task size) in its last WORKER entry of the policy table
    policy: dict[str, tuple[float, int | None]]
    load: float

    @property
    def over_ideal(self) -> float:
        return self.makespan_s / (self.items / CAPACITY)


def settle(fleet: TreeFleet, least_s: float = 12.0) -> None:
    """After the warm-up: wait `least_s` (a rebalance interval and a sample, for the policy
    to act on the warm-up's samples), then until the partitions have not moved for 5 s
    (BenchError after 120 s)."""
    time.sleep(least_s)
    wait_for_group(fleet, list(WORKERS), timeout_s=120, quiet_s=5.0)


def policy_rates(fleet: TreeFleet) -> dict[str, tuple[float, int | None]]:
    """Each worker's capacity and task size in its latest WORKER entry."""
    fleet.start("dump", "dump", "policy", "--from-beginning").wait(timeout=120)
    found: dict[str, tuple[float, int | None]] = {}
    for line in fleet.log_path("dump").read_text(errors="replace").splitlines():
        try:
            value = json.loads(line).get("value") or {}
        except json.JSONDecodeError:
            continue
        if value.get("worker") in WORKERS:
            found[value["worker"]] = (value["capacity_items_per_s"], value.get("task_size"))
    return found


def run_job(fleet: TreeFleet, logdir: Path, items: int, tag: str) -> tuple[str, float]:
    listing = write_listing(logdir / f"{fleet.config.topic_prefix}{tag}.txt", items, tag)
    submitted = time.time()
    job = fleet.client.submit("sim:ms=5", [f"@{listing}"])
    job.wait(timeout_s=1800)
    return job.job_id, time.time() - submitted


def measure(bootstrap: str, logdir: Path, src: Path, round_: int, tree: int,
            args: argparse.Namespace) -> Row:
    tag = f"decode-{round_}-{tree}-"
    fleet = TreeFleet(src, bootstrap, args.partitions, logdir, tag)
    try:
        fleet.create_topics()
        fleet.sysinfo()
        fleet.start("controller", "controller")
        for name, (model, _) in WORKERS.items():
            fleet.worker(name, model, "--assignor", "policy", "--min-rebalance-interval-s", "10")
        wait_for_group(fleet, list(WORKERS), timeout_s=300)
        run_job(fleet, logdir, round(args.warmup_s * CAPACITY), "warmup")
        settle(fleet)
        items = round(args.ideal_s * CAPACITY)
        reader = CommittedResults(fleet.config).start()
        job_id, makespan = run_job(fleet, logdir, items, "job")
        reader.read_to_end()
        results = [r for r in reader.snapshot() if r.job_id == job_id]
        reader.stop()
        check = audit(results, job_id, [f"job-{i:07d}" for i in range(items)])
        per_worker: Counter[str] = Counter()
        for result in {r.task_id: r for r in results}.values():
            per_worker[result.worker] += len(result.names)
        log = fleet.log_path("controller").read_text(errors="replace")
        return Row(src, round_, items, makespan, {w: per_worker[w] / items for w in WORKERS},
                   len(re.findall(f"job {job_id} .*re-issued as attempt", log)),
                   check["lost_items"],
                   check["duplicate_records"], policy_rates(fleet), os.getloadavg()[0])
    finally:
        fleet.stop_all()


TABLE_HEAD = ("| src | round | items | makespan s | over ideal | share wd / wc | re-issued | "
              "lost / duplicate | policy items/s wd / wc | task size wd / wc | load |\n"
              "|---|---:|---:|---:|---:|---|---:|---|---|---|---:|")


def row(r: Row) -> str:
    rates = " / ".join(f"{r.policy[w][0]:,.0f}" if w in r.policy else "-" for w in WORKERS)
    sizes = " / ".join(str(r.policy[w][1]) if w in r.policy else "-" for w in WORKERS)
    return (f"| {r.src} | {r.round} | {r.items:,} | {r.makespan_s:.1f} | {r.over_ideal:.2f} | "
            f"{r.shares['wd']:.2f} / {r.shares['wc']:.2f} | {r.reissued} | "
            f"{r.lost_items} / {r.duplicate_records} | {rates} | {sizes} | {r.load:.1f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, action="append", default=[],
                        help="a source tree to run (its src folder); repeat to compare")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ideal-s", type=float, default=40.0,
                        help="the measured job: seconds of the pair's capacity")
    parser.add_argument("--warmup-s", type=float, default=15.0)
    parser.add_argument("--partitions", type=int, default=24, help="task partitions")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)
    trees = args.src or [HERE]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="decode-bound-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"# ops/bench/decode_bound.py at {source_version()}, load {os.getloadavg()[0]:.1f}\n"
          f"{TABLE_HEAD}", flush=True)
    broker = start_broker(workdir / "kafka")
    rows = []
    try:
        for round_ in range(args.rounds):
            order = list(enumerate(trees))
            for tree, src in order if round_ % 2 == 0 else order[::-1]:
                try:
                    rows.append(measure(broker.bootstrap, workdir, src, round_ + 1, tree, args))
                except BenchError as exc:
                    print(f"{src} round {round_ + 1} failed: {exc}", flush=True)
                    continue
                print(row(rows[-1]), flush=True)
    finally:
        broker.clean()
    print(f"\nload at the end {os.getloadavg()[0]:.1f}; logs: {workdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
