"""Benchmark: what each scheduling piece is worth, pacing x policy assignor x migration (30.5).

Two scenarios, each on one local broker with a sysinfo app, a controller and `sim` workers
(w<N>: `sim:ms=N`, 1000/N items/s), one job of `--ideal-s` seconds of the pool's capacity in
tasks of `--chunk` items on `--partitions` task partitions:

- `mixed`: capacities 1:2:4 (w10, w20, w40; 175 items/s);
- `straggler`: four w10, one of them 8x slower from the job's first item on (P4's straggler:
  its calibration batch runs at full speed, so the policy learns of it from its samples).

Every combination of the three pieces runs in each scenario, each run on a fresh topic prefix:
pacing (the controller's `issue_ahead_s`, default 10 s; off: 0, every task at once, round robin
over the partitions), the policy assignor (the workers' `assignor`, policy; off: roundrobin,
aiokafka's equal shares; sysinfo runs either way, so the controller knows the same speeds) and
migration (the controller's `migration_slack`, default 3; off: 0). The workers rebalance on a
policy change at most every 10 s (as P3). The makespan runs from submission to COMPLETED; the
ideal is P3's: the least time the workers at their capacities need for the job. Runs go in an
order in which each switches one piece from the last, reversed and with the scenarios swapped
on every other repeat. Every run audits the committed results (no item lost, no (task,
attempt) record twice). Prints the runs, then each piece's effect: the geometric mean, over the
four pairs of runs that differ only in it, of makespan with it over without.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))

from committed import CommittedResults, audit
from failover_common import (
    Fleet,
    start_broker,
    wait_for_group,
    write_listing,
)
from imagenet_job import banner
from p1_stack import BenchError
from p3_policy import Case, ideal_makespan, model_of, settle

PIECES = ("pacing", "policy", "migration")

SCENARIOS = {
    "mixed": (("w10", 10), ("w20", 20), ("w40", 40)),
    "straggler": (("w10", 10), ("w10b", 10), ("w10c", 10), ("w10d", 10)),
}
#: the straggler scenario's slow worker, from which item on (after calibration), how much slower
STRAGGLER = ("w10d", 0, 8.0)


@dataclass(frozen=True)
class Combo:
    """Which pieces are on in one run."""

    pacing: bool
    policy: bool
    migration: bool

    def on(self, piece: str) -> bool:
        return bool(getattr(self, piece))

    def without(self, piece: str) -> Combo:
        return Combo(**{p: self.on(p) and p != piece for p in PIECES})

    @property
    def label(self) -> str:
        return "-".join(p for p in PIECES if self.on(p)) or "none"  # topic names: no "+"

    def controller_args(self) -> list[str]:
        return ([] if self.pacing else ["--issue-ahead-s", "0"]) + (
            [] if self.migration else ["--migration-slack", "0"])

    @property
    def assignor(self) -> str:
        return "policy" if self.policy else "roundrobin"


def gray_order() -> list[Combo]:
    """The eight combinations, each differing from the one before in one piece."""
    codes = [i ^ (i >> 1) for i in range(8)]
    return [Combo(*(bool(code >> (2 - bit) & 1) for bit in range(3))) for code in codes]


@dataclass(frozen=True)
class Run:
    repeat: int
    scenario: str
    combo: Combo

    def case(self) -> Case:
        slowdown = STRAGGLER if self.scenario == "straggler" else None
        return Case(f"{self.scenario}-{self.combo.label}-{self.repeat}", self.combo.assignor,
                    slowdown, SCENARIOS[self.scenario])


def plan(scenarios: list[str], repeats: int) -> list[Run]:
    """Every run in order: Gray order, reversed and the scenarios swapped every other repeat."""
    runs = []
    for repeat in range(repeats):
        combos = gray_order()[:: 1 if repeat % 2 == 0 else -1]
        names = scenarios[:: 1 if repeat % 2 == 0 else -1]
        runs += [Run(repeat, name, combo) for name in names for combo in combos]
    return runs


def capacity(case: Case) -> float:
    """The workers' items per second together, a slowed worker at its slowed speed."""
    slow = case.slowdown
    return sum(1000 / ms / (slow[2] if slow is not None and slow[0] == worker else 1)
               for worker, ms in case.workers)


def items_for(case: Case, ideal_s: float) -> int:
    """A job's items: `ideal_s` of the case's capacity, whole tasks or not."""
    return max(1, round(ideal_s * capacity(case)))


@dataclass(frozen=True)
class Measured:
    run: Run
    items: int
    makespan_s: float
    ideal_s: float
    reissued: int
    shares: dict[str, float]
    lost_items: int
    duplicate_records: int
    load: float

    @property
    def over_ideal(self) -> float:
        return self.makespan_s / self.ideal_s


def start(fleet: Fleet, case: Case, combo: Combo) -> None:
    """The run's processes, once the workers own every partition (and the policy settled)."""
    fleet.create_topics()
    fleet.sysinfo()
    fleet.start("controller", "controller", *combo.controller_args())
    for worker in case.ms:
        fleet.worker(worker, model_of(worker, case, 8), "--assignor", combo.assignor,
                     "--min-rebalance-interval-s", "10")
    wait_for_group(fleet, list(case.ms), timeout_s=300)
    settle(fleet, case)


def measure(bootstrap: str, logdir: Path, run: Run, args: argparse.Namespace) -> Measured:
    """One run: a fresh fleet, one job, its makespan and audit."""
    case = run.case()
    items = items_for(case, args.ideal_s)
    fleet = Fleet(bootstrap, args.partitions, logdir, case.name)
    try:
        start(fleet, case, run.combo)
        reader = CommittedResults(fleet.config).start()
        listing = write_listing(logdir / f"{case.name}.txt", items, case.name)
        submitted = time.time()
        job = fleet.client.submit("sim:ms=10", [f"@{listing}"], chunk_size=args.chunk)
        job.wait(timeout_s=3600)
        makespan = time.time() - submitted
        reader.read_to_end()
        results = [r for r in reader.snapshot() if r.job_id == job.job_id]
        reader.stop()
        check = audit(results, job.job_id, [f"{case.name}-{i:07d}" for i in range(items)])
        per_worker: Counter[str] = Counter()
        for result in {r.task_id: r for r in results}.values():
            per_worker[result.worker] += len(result.names)
        log = fleet.log_path("controller").read_text(errors="replace")
        return Measured(run, items, makespan, ideal_makespan(items, case),
                        len(re.findall(r"re-issued as attempt", log)),
                        {w: per_worker[w] / items for w in case.ms}, check["lost_items"],
                        check["duplicate_records"], os.getloadavg()[0])
    finally:
        fleet.stop_all()


def row(m: Measured) -> str:
    """One run's line of the table."""
    on = ["on" if m.run.combo.on(p) else "off" for p in PIECES]
    shares = "/".join(f"{m.shares[w]:.2f}" for w in m.shares)
    return (f"| {m.run.scenario} | {' | '.join(on)} | {m.run.repeat + 1} | {m.items} | "
            f"{m.makespan_s:.1f} | {m.ideal_s:.1f} | {m.over_ideal:.2f} | {m.reissued} | "
            f"{shares} | {m.lost_items} / {m.duplicate_records} | {m.load:.1f} |")


TABLE_HEAD = ("| scenario | pacing | policy assignor | migration | repeat | items | makespan s | "
              "ideal s | over ideal | tasks re-issued | share of results | lost items / "
              "duplicate records | load |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"
              "---|---:|")


@dataclass(frozen=True)
class Effect:
    scenario: str
    piece: str
    #: geometric mean of makespan with the piece over without, across the pairs
    ratio: float
    low: float
    high: float
    pairs: int


def effects(measured: list[Measured]) -> list[Effect]:
    """Each piece's effect per scenario, from the median makespan of each combination."""
    found = []
    for scenario in dict.fromkeys(m.run.scenario for m in measured):
        spans: dict[Combo, list[float]] = {}
        for m in measured:
            if m.run.scenario == scenario:
                spans.setdefault(m.run.combo, []).append(m.over_ideal)
        medians = {combo: median(values) for combo, values in spans.items()}
        for piece in PIECES:
            ratios = [span / medians[combo.without(piece)] for combo, span in medians.items()
                      if combo.on(piece) and combo.without(piece) in medians]
            if ratios:
                mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
                found.append(Effect(scenario, piece, mean, min(ratios), max(ratios),
                                    len(ratios)))
    return found


def effects_table(found: list[Effect]) -> str:
    lines = ["| scenario | piece | makespan with / without (geometric mean) | range over the "
             "pairs | pairs |", "|---|---|---:|---|---:|"]
    lines += [f"| {e.scenario} | {e.piece} | {e.ratio:.2f} | {e.low:.2f}-{e.high:.2f} | "
              f"{e.pairs} |" for e in found]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="mixed,straggler",
                        help="comma-separated: mixed, straggler")
    parser.add_argument("--ideal-s", type=float, default=30.0,
                        help="each job's size: seconds of the pool's capacity")
    parser.add_argument("--partitions", type=int, default=24, help="task partitions")
    parser.add_argument("--chunk", type=int, default=16, help="items per task")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--tiny", action="store_true",
                        help="jobs of 3 s on 8 partitions: a quick check that it all runs")
    parser.add_argument("--plan", action="store_true",
                        help="print the runs with their items and settings; start nothing")
    parser.add_argument("--workdir", type=Path,
                        help="where the processes' logs stay (default: a new temporary folder)")
    args = parser.parse_args(argv)
    args.scenarios = args.scenarios.split(",")
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown or args.repeats < 1 or args.ideal_s <= 0:
        parser.error(f"unknown scenarios {sorted(unknown)}" if unknown
                     else "--repeats and --ideal-s must be positive")
    if args.tiny:
        args.ideal_s, args.partitions = 3.0, 8
    return args


def describe(run: Run, args: argparse.Namespace) -> str:
    """A planned run in one line: its workers' models, items and the flags that differ."""
    case = run.case()
    models = " ".join(model_of(w, case, 8) for w in case.ms)
    return (f"{case.name}: {items_for(case, args.ideal_s)} items; workers {models} "
            f"--assignor {run.combo.assignor}; controller "
            f"{' '.join(run.combo.controller_args()) or '(defaults)'}")


def run_all(args: argparse.Namespace, workdir: Path) -> list[Measured]:
    broker = start_broker(workdir / "kafka")
    measured = []
    try:
        for run in plan(args.scenarios, args.repeats):
            try:
                m = measure(broker.bootstrap, workdir, run, args)
            except BenchError as exc:  # one run's failure costs that run, not the study
                print(f"{run.case().name} failed: {exc}", flush=True)
                continue
            print(row(m), flush=True)
            measured.append(m)
    finally:
        broker.clean()
    return measured


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    args = parse_args(given)
    # a study run in the background is stopped by SIGTERM: its fleet and broker go with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(banner("ops/bench/ablation.py", given), flush=True)
    if args.plan:
        print("\n".join(describe(run, args) for run in plan(args.scenarios, args.repeats)))
        return 0
    print(TABLE_HEAD, flush=True)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ablation-"))
    workdir.mkdir(parents=True, exist_ok=True)
    measured = run_all(args, workdir)
    print(f"\n{TABLE_HEAD}\n" + "\n".join(row(m) for m in measured))
    print(f"\n{effects_table(effects(measured))}")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}; the processes' logs: {workdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
