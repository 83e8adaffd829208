"""Benchmark P7 for the controller: the owning replica killed -9 or SIGSTOPped mid-job, and
the time until the job's progress resumes.

One broker, two controller replicas (session timeout 6 s, the default), two workers on
`sim:ms=2`, 4 job partitions. Each fault hits a fresh job of `--items` items when 10% of it is
done, on the replica that owns the job's partition: `kill9` (a replacement replica starts at
once, as an operator's supervisor would) or `sigstop` (SIGCONT after 1.5x the session timeout;
the paused replica must find itself fenced and rejoin). (a) takeover: signal -> the other
replica logs that it owns the job's partition. (b) resumed: signal -> the first job event
whose done count is above the count at the signal. Medians of `--runs`, in seconds and as
multiples of the session timeout. Every job must complete with its counts equal to its output.
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from failover_common import Fleet, source_version, start_broker, wait_for_group, write_listing
from p1_stack import BenchError

from inferstream.client.client import Job
from inferstream.kafka.settings import partition_for

SESSION_S = 6.0
PARTITIONS = 4
_OWNING = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "
                     r".*owning job partitions=\[([\d, ]*)\]")


def owning_lines(fleet: Fleet, name: str) -> list[tuple[float, set[int]]]:
    found = []
    for line in fleet.log_path(name).read_text(errors="replace").splitlines():
        match = _OWNING.match(line)
        if match:
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.append((stamp, {int(p) for p in match.group(2).split(",") if p.strip()}))
    return found


def owner(fleet: Fleet, replicas: list[str], partition: int) -> str | None:
    for name in replicas:
        lines = owning_lines(fleet, name)
        if lines and partition in lines[-1][1]:
            return name
    return None


def settled(fleet: Fleet, replicas: list[str], timeout_s: float = 120) -> None:
    """Wait until the live replicas own every job partition between them, each some (the
    rebalance after the previous fault is over), so each fault hits a settled group."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [name for name in replicas if fleet.procs[name].poll() is not None]
        if dead:
            raise BenchError(f"controller replica(s) {dead} exited; see their logs")
        latest = [owning_lines(fleet, name) for name in replicas]
        sets = [lines[-1][1] for lines in latest if lines]
        if len(sets) == len(replicas) and all(sets) and sorted(
                p for s in sets for p in s) == list(range(PARTITIONS)):
            return
        time.sleep(0.2)
    for name in replicas:
        tail = fleet.log_path(name).read_text(errors="replace").splitlines()[-25:]
        print(f"--- {name} (last lines)", *tail, sep="\n", file=sys.stderr)
    raise BenchError(f"the replicas {replicas} did not settle in {timeout_s:g} s")


def hit(fleet: Fleet, replicas: list[str], victim: str, kind: str) -> None:
    """kill -9 the victim and start a replacement, or SIGSTOP it."""
    if kind == "kill9":
        fleet.procs[victim].send_signal(signal.SIGKILL)
        fleet.procs[victim].wait(timeout=30)
        replicas.remove(victim)
        replacement = f"c{len(fleet.procs)}"
        fleet.start(replacement, "controller")
        replicas.append(replacement)
    else:
        fleet.procs[victim].send_signal(signal.SIGSTOP)


def progress_after(job: Job, done_then: int, signalled: float) -> tuple[int, float | None]:
    """The items done before the signal, and the seconds until the job's next progress."""
    for status in job.events(timeout_s=300):
        # events() reads the job's events from the start: only one written after the signal
        if status.updated_at_ms < signalled * 1000:
            done_then = max(done_then, status.done_items)
        elif status.done_items > done_then or status.finished:
            return done_then, time.time() - signalled
    return done_then, None


@dataclass(frozen=True)
class Target:
    """A job a tenth done, and the replica that owns it."""

    job: Job
    listing: Path
    home: int
    victim: str
    done_items: int


def job_at_a_tenth(fleet: Fleet, replicas: list[str], items: int, n: int) -> Target:
    """Submit job `n` of `items` once the replicas settled; return when a tenth is done."""
    settled(fleet, replicas)
    listing = write_listing(fleet.logdir / f"job{n}.txt", items, f"job{n}")
    job = fleet.client.submit("sim:ms=2", [f"@{listing}"], chunk_size=10)
    home = partition_for(job.job_id, PARTITIONS)
    for status in job.events(timeout_s=300):
        if status.done_items >= items // 10:
            break
    victim = owner(fleet, replicas, home)
    if victim is None:
        raise BenchError(f"no replica owns partition {home}")
    return Target(job, listing, home, victim, status.done_items)


def one_fault(fleet: Fleet, replicas: list[str], kind: str, items: int, n: int
              ) -> dict[str, object]:
    target = job_at_a_tenth(fleet, replicas, items, n)
    job, home, victim = target.job, target.home, target.victim
    done_then, signalled = target.done_items, time.time()
    hit(fleet, replicas, victim, kind)
    done_then, resumed = progress_after(job, done_then, signalled)
    if kind == "sigstop":
        time.sleep(max(0.0, signalled + 1.5 * SESSION_S - time.time()))
        fleet.procs[victim].send_signal(signal.SIGCONT)
    final = job.wait(timeout_s=600)
    lines = list(job.results())
    ok = sum(1 for line in lines if line["status"] == "ok")
    exact = (final.done_items, final.ok_items) == (len(lines), ok) == (items, items)
    takeover = next((t - signalled for name in replicas if name != victim
                     for t, owned in owning_lines(fleet, name)
                     if t >= signalled - 0.5 and home in owned), None)
    return {"kind": kind, "victim": victim, "takeover": takeover, "resumed": resumed,
            "exact": exact, "done_at_signal": done_then}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="p7c-") as tmp:
        broker = start_broker(Path(tmp) / "kafka")
        fleet = Fleet(broker.bootstrap, PARTITIONS, Path(tmp), "p7c")
        try:
            fleet.create_topics()
            replicas = ["c1", "c2"]
            for name in replicas:
                fleet.start(name, "controller")
            fleet.worker("w1", "sim:ms=2")
            fleet.worker("w2", "sim:ms=2")
            wait_for_group(fleet, ["w1", "w2"], timeout_s=300)
            for n in range(args.runs * 2):
                kind = ("kill9", "sigstop")[n % 2]
                row = one_fault(fleet, replicas, kind, args.items, n)
                print(row, flush=True)
                rows.append(row)
        finally:
            fleet.stop_all()
            broker.clean()
    print(table(rows, args.items))
    return 0


def table(rows: list[dict[str, object]], items: int) -> str:
    lines = [f"P7 (controller) at {source_version()}: 1 broker, 2 controller replicas (session "
             f"timeout {SESSION_S:g} s), 2 workers sim:ms=2, {PARTITIONS} job partitions; a job "
             f"of {items} items per fault, hit at 10%", "",
             "| fault | (a) takeover | (b) progress resumed | counts equal the output | runs |",
             "|---|---:|---:|---|---:|"]
    for kind in ("kill9", "sigstop"):
        mine = [r for r in rows if r["kind"] == kind]
        takeovers = [float(r["takeover"]) for r in mine if r["takeover"] is not None]  # type: ignore[arg-type]
        resumes = [float(r["resumed"]) for r in mine if r["resumed"] is not None]  # type: ignore[arg-type]

        def cell(values: list[float]) -> str:
            if not values:
                return "-"
            median = statistics.median(values)
            return f"{median:.2f} s ({median / SESSION_S:.2f}x)"

        exact = sum(1 for r in mine if r["exact"])
        lines.append(f"| {kind} | {cell(takeovers)} | {cell(resumes)} | {exact}/{len(mine)} | "
                     f"{len(mine)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
