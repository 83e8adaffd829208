"""Benchmark P7 for an abort: a supervised controller's process dies of SIGABRT mid-job (as
it did inside librdkafka, issue 26), and the time until the job's progress resumes.

One broker, `--replicas` controller replicas (default 1: no other replica to take over, the
case where an abort used to cost the job), each under its supervisor (`--restart on`, every
restart after 1 s: the first delay, as after a healthy run, where the runs here come 15 s
apart), two workers on `sim:ms=2`, 4 job partitions. Each run submits a fresh job of
`--items` items and, when 10% of it is done, sends SIGABRT (kill -6) to the process of the
replica that owns the job's partition, never to its supervisor. (a) restarted: abort -> the
supervisor's line that the next process started. (b) owning: abort -> a replica logs that it
owns the job's partition again. (c) resumed: abort -> the first job event whose done count is
above the count at the abort. Every job must complete with its counts equal to its output,
each item once.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from failover_common import Fleet, source_version, start_broker, wait_for_group
from p7_controller import PARTITIONS, SESSION_S, job_at_a_tenth, owning_lines, progress_after

_STARTED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*"
                      r"controller process (\d+) started")


def started_lines(fleet: Fleet, name: str) -> list[tuple[float, int]]:
    """(log time, pid) of each process the replica's supervisor started."""
    found = []
    for line in fleet.log_path(name).read_text(errors="replace").splitlines():
        match = _STARTED.match(line)
        if match:
            stamp = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.append((stamp, int(match[2])))
    return found


def after(times: list[float], since: float) -> float | None:
    """Seconds from `since` to the first of `times` after it."""
    return next((t - since for t in sorted(times) if t >= since), None)


def one_abort(fleet: Fleet, replicas: list[str], items: int, n: int) -> dict[str, object]:
    target = job_at_a_tenth(fleet, replicas, items, n)
    pid = started_lines(fleet, target.victim)[-1][1]
    aborted = time.time()
    os.kill(pid, signal.SIGABRT)
    done_then, resumed = progress_after(target.job, target.done_items, aborted)
    final = target.job.wait(timeout_s=600)
    names = sorted(str(line["item"]) for line in target.job.results())
    exact = (final.done_items, final.ok_items, len(names)) == (items, items, items) and (
        names == sorted(target.listing.read_text().split()))
    owning = [t for name in replicas for t, owned in owning_lines(fleet, name)
              if target.home in owned]
    restarts = [t for t, _ in started_lines(fleet, target.victim)]
    return {"victim": target.victim, "restarted": after(restarts, aborted),
            "owning": after(owning, aborted), "resumed": resumed, "exact": exact,
            "done_at_abort": done_then}


def run(args: argparse.Namespace, tmp: Path) -> list[dict[str, object]]:
    rows = []
    broker = start_broker(tmp / "kafka")
    fleet = Fleet(broker.bootstrap, PARTITIONS, tmp, "p7a")
    replicas = [f"c{i + 1}" for i in range(args.replicas)]
    try:
        fleet.create_topics()
        for name in replicas:
            fleet.start(name, "controller", "--restart", "on", "--restart-max-delay-s", "1")
        fleet.worker("w1", "sim:ms=2")
        fleet.worker("w2", "sim:ms=2")
        wait_for_group(fleet, ["w1", "w2"], timeout_s=300)
        for n in range(args.runs):
            row = one_abort(fleet, replicas, args.items, n)
            print(row, flush=True)
            rows.append(row)
    finally:
        for name in replicas:  # a drain, so that no process outlives its supervisor
            fleet.procs[name].send_signal(signal.SIGTERM)
        for name in replicas:
            fleet.procs[name].wait(timeout=60)
        fleet.stop_all()
        broker.clean()
    return rows


def table(rows: list[dict[str, object]], items: int, replicas: int) -> str:
    def cell(key: str) -> str:
        values = [float(r[key]) for r in rows if r[key] is not None]  # type: ignore[arg-type]
        if not values:
            return "-"
        return (f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f}, "
                f"{statistics.median(values) / SESSION_S:.2f}x)")

    exact = sum(1 for r in rows if r["exact"])
    return "\n".join([
        f"P7 (abort) at {source_version()}: 1 broker, {replicas} supervised controller "
        f"replica(s) (session timeout {SESSION_S:g} s), 2 workers sim:ms=2, {PARTITIONS} job "
        f"partitions; a job of {items} items per abort, SIGABRT at 10%", "",
        "| (a) restarted | (b) owning again | (c) progress resumed | each item once | runs |",
        "|---:|---:|---:|---|---:|",
        f"| {cell('restarted')} | {cell('owning')} | {cell('resumed')} | {exact}/{len(rows)} "
        f"| {len(rows)} |",
        "", "Medians (min-max, x the session timeout)."])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=1)
    args = parser.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the aborts leave no core files
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="p7a-") as tmp:
        rows = run(args, Path(tmp))
    print(table(rows, args.items, args.replicas))
    print(f"({time.monotonic() - started:.0f} s in all)")
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
