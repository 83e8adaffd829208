"""Benchmark P3: a job's makespan on workers of capacities 1:2:4:8, policy against round-robin.

Four `sim` workers (`sim:ms=80/40/20/10`: 12.5, 25, 50 and 100 items/s) take one job of
`--items` items on `--partitions` task partitions, each case on a fresh topic prefix of one
local broker, with a sysinfo app and a controller:

- `roundrobin`: aiokafka's round-robin assignor, every worker an equal share of partitions;
- `policy`: the PolicyAssignor, shares from the sysinfo app's policy;
- `slowdown`: the policy, and the fastest worker slows down 4x half-way through its share.

The makespan runs from the job's submission to its COMPLETED event; the ideal is the time the
summed capacities need for the job (with the slowdown: the first time by which the workers,
each at its capacity and the slow one slowed after its first items, could have done it all).
The rebalance cost of the slowdown case is the time from the first revocation after the
submission to every partition owned again, and the throughput lost: the items the pool's
capacity would have done in that time less those finished in it. `policy-1to4` and
`roundrobin-1to4` are the acceptance check's two workers of capacities 1:4 (w40, w10).
Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from committed import CommittedResults, SeenResult, audit
from failover_common import (
    Fleet,
    Ownership,
    first_full_ownership,
    owners_at,
    ownership_events,
    source_version,
    start_broker,
    wait_for_group,
    write_listing,
)
from p1_stack import BenchError

#: ms per item of each worker: capacities 1:2:4:8, and the acceptance check's 1:4.
MS = {"w80": 80, "w40": 40, "w20": 20, "w10": 10}
MS_1_4 = {"w40": 40, "w10": 10}


@dataclass(frozen=True)
class Case:
    name: str
    assignor: str
    #: (worker, items after which it slows down, factor)
    slowdown: tuple[str, int, float] | None = None
    workers: tuple[tuple[str, int], ...] = tuple(MS.items())

    @property
    def ms(self) -> dict[str, int]:
        return dict(self.workers)


@dataclass(frozen=True)
class Outcome:
    case: Case
    makespan_s: float
    ideal_s: float
    shares: dict[str, float]
    owned: dict[str, int]
    rebalance_s: float | None
    throughput_lost: float | None
    lost_items: int
    #: the guarantee: committed records of one (task, attempt) more than once
    duplicate_records: int
    #: items in the records of two attempts of a task (a re-issued task whose first attempt
    #: also finished: allowed, the job's output keeps the first)
    items_twice: int


def ideal_makespan(items: int, case: Case) -> float:
    """The least time in which the workers at their capacities do `items` (bisection)."""
    slowdown = case.slowdown

    def done_by(t: float) -> float:
        total = 0.0
        for worker, ms in case.workers:
            rate = 1000.0 / ms
            if slowdown is not None and worker == slowdown[0]:
                fast_s = slowdown[1] / rate
                total += rate * t if t <= fast_s else slowdown[1] + rate / slowdown[2] * (
                    t - fast_s)
            else:
                total += rate * t
        return total
    low, high = 0.0, 1e6
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if done_by(mid) < items else (low, mid)
    return high


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def model_of(worker: str, case: Case, calibration_items: int) -> str:
    name = f"sim:ms={case.ms[worker]}"
    if case.slowdown is not None and case.slowdown[0] == worker:
        after = case.slowdown[1] + 2 * calibration_items  # warm-up and timed batch count
        name += f",slow_after={after},slow_factor={case.slowdown[2]:g}"
    return name


def start_fleet(fleet: Fleet, case: Case) -> None:
    fleet.create_topics()
    fleet.sysinfo()
    fleet.start("controller", "controller")
    for worker in case.ms:
        fleet.worker(worker, model_of(worker, case, 8), "--assignor", case.assignor,
                     "--min-rebalance-interval-s", "10")
    wait_for_group(fleet, list(case.ms), timeout_s=300)


def settle(fleet: Fleet, case: Case, timeout_s: float = 180) -> None:
    """Policy cases: wait until the fastest worker owns at least 3/4 of its capacity share
    of the partitions and nothing moved for 5 s."""
    if case.assignor != "policy":
        return
    deadline = time.monotonic() + timeout_s
    n = fleet.config.task_partitions_for()
    while time.monotonic() < deadline:
        fleet.check_alive(*case.ms)
        events = ownership_events(fleet, list(case.ms))
        owned = owners_at(events, time.time())
        fastest = (1 / 10) / sum(1 / ms for ms in case.ms.values())  # w10's capacity share
        if (len(owned.get("w10", ())) >= 0.75 * fastest * n
                and time.time() - events[-1].t >= 5):
            return
        time.sleep(0.5)
    raise BenchError(f"the policy never settled: {owners_at(events, time.time())}")


def run_case(broker_servers: str, logdir: Path, case: Case, items: int,
             partitions: int, chunk: int) -> Outcome:
    fleet = Fleet(broker_servers, partitions, logdir, f"p3-{case.name}")
    try:
        start_fleet(fleet, case)
        settle(fleet, case)
        reader = CommittedResults(fleet.config).start()
        listing = write_listing(logdir / f"{case.name}.txt", items, case.name)
        events_before = len(ownership_events(fleet, list(case.ms)))
        submitted = time.time()
        job = fleet.client.submit("sim:ms=10", [f"@{listing}"], chunk_size=chunk)
        job.wait(timeout_s=3600)
        makespan = time.time() - submitted
        reader.read_to_end()
        results = reader.snapshot()
        reader.stop()
        names = [f"{case.name}-{i:07d}" for i in range(items)]
        check = audit(results, job.job_id, names)
        per_worker: Counter[str] = Counter()
        for result in {(r.task_id): r for r in results if r.job_id == job.job_id}.values():
            per_worker[result.worker] += len(result.names)
        events = ownership_events(fleet, list(case.ms))
        owned = owners_at(events, submitted)
        window = rebalance_window(events[events_before:], partitions, case)
        return Outcome(case, makespan, ideal_makespan(items, case),
                       {w: per_worker[w] / items for w in case.ms},
                       {w: len(owned.get(w, ())) for w in case.ms},
                       None if window is None else window[1] - window[0],
                       None if window is None else items_lost(results, job.job_id, window,
                                                              case),
                       check["lost_items"], check["duplicate_records"],
                       check["duplicate_items"])
    finally:
        fleet.stop_all()


def rebalance_window(events: list[Ownership], partitions: int, case: Case
                     ) -> tuple[float, float] | None:
    """From the first revocation in `events` to every partition owned again (Unix times)."""
    revoked = [e for e in events if e.kind == "revoked" and e.partitions]
    if not revoked:
        return None
    full = first_full_ownership(events, set(case.ms), partitions, revoked[0].t)
    return None if full is None else (revoked[0].t, full)


def items_lost(results: list[SeenResult], job_id: str, window: tuple[float, float],
               case: Case) -> float:
    """Items the pool's capacity would have done during the rebalance `window`, less the
    items whose tasks finished in it (before any slowdown: the capacities as started)."""
    start, end = window
    done = sum(len(r.names) for r in results
               if r.job_id == job_id and start <= r.finished_at <= end)
    capacity = sum(1000 / ms for ms in case.ms.values())
    return max(0.0, capacity * (end - start) - done)


def report(outcomes: list[Outcome], args: argparse.Namespace) -> str:
    lines = [f"P3 at {source_version()}: {args.items} items in tasks of {args.chunk} on "
             f"{args.partitions} task partitions; w<N>: sim:ms=N, 1000/N items/s",
             "",
             "| case | makespan s | ideal s | over ideal | share of results | "
             "partitions at submission | rebalance s | throughput lost (items) | "
             "lost items / duplicate records / items of two attempts |",
             "|---|---:|---:|---:|---|---|---:|---:|---|"]
    lines += [row(o) for o in outcomes]
    return "\n".join(lines)


def row(o: Outcome) -> str:
    """One case's line of the table."""
    shares = "/".join(f"{w} {o.shares[w]:.2f}" for w in o.case.ms)
    owned = "/".join(str(o.owned[w]) for w in o.case.ms)
    rebalance = "-" if o.rebalance_s is None else f"{o.rebalance_s:.1f}"
    lost = "-" if o.throughput_lost is None else f"{o.throughput_lost:.0f}"
    return (f"| {o.case.name} | {o.makespan_s:.1f} | {o.ideal_s:.1f} | "
            f"{o.makespan_s / o.ideal_s:.2f} | {shares} | {owned} | {rebalance} | {lost} | "
            f"{o.lost_items} / {o.duplicate_records} / {o.items_twice} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8000)
    parser.add_argument("--partitions", type=int, default=120)
    parser.add_argument("--chunk", type=int, default=8, help="items per task")
    parser.add_argument("--cases", default="roundrobin,policy,slowdown")  # ,policy-1to4,...
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    half = int(args.items * 8 / 15 / 2)  # half of the fastest worker's share
    cases = {"roundrobin": Case("roundrobin", "roundrobin"),
             "policy": Case("policy", "policy"),
             "slowdown": Case("slowdown", "policy", ("w10", half, 4.0)),
             "policy-1to4": Case("policy-1to4", "policy", workers=tuple(MS_1_4.items())),
             "roundrobin-1to4": Case("roundrobin-1to4", "roundrobin",
                                     workers=tuple(MS_1_4.items()))}
    with tempfile.TemporaryDirectory(prefix="p3-") as tmp:
        broker = start_broker(Path(tmp) / "kafka")
        try:
            outcomes = []
            for name in args.cases.split(","):
                outcome = run_case(broker.bootstrap, Path(tmp), cases[name], args.items,
                                   args.partitions, args.chunk)
                print(row(outcome), flush=True)  # a later case's failure loses nothing
                outcomes.append(outcome)
        finally:
            broker.clean()
    print(report(outcomes, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
