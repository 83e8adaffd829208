"""The scale study (issue 15): one job on N = 1 ... 100 simulated GPU nodes, node outages at
N = 100, a heterogeneous mix with and without the policy assignor; a table and a plot.

Each node is one member of the pool (`inferstream worker --members M` packs M into a process;
the members are the real worker: assignor, commits, sysinfo samples, task controls). A node
runs `sim:as=<profile>,slower=S`: one Tesla P40's published AlexNet or GoogLeNet throughput
(`models.names.GPU_PROFILES`), S times slower, S chosen so that a node does `--node-rate`
items/s at batch `--batch` (a 2-core host cannot sleep for 100 real GPUs' worth of items).
Each job is sized to run `--job-s` seconds at its ideal rate, N x the node rate, so N = 100
gets a job 100 x the size of N = 1's. Speed-up = rate(N) / rate(1); efficiency = speed-up / N.
Rates are items over the time from submission to the COMPLETED event, as a user sees it.

Outages at the largest N: kill -9 of 10 % of the members (run as one-member processes) and,
separately, of one whole member process, at a third of the job's ideal time; the job must
complete with every item exactly once (tests/chaos/verifier.py), and the time lost is its
duration minus the same job's duration without the outage.

    python ops/bench/scale_study.py                       # the full study (about 40 minutes)
    python ops/bench/scale_study.py --nodes 1 10 --profiles alexnet --job-s 10 --no-outage \\
        --no-mix                                          # what `make test` runs (tests/...)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from subprocess import Popen

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from failover_common import Fleet, start_broker, write_listing
from job_timeline import timeline
from p1_cpu import process_cpu_s as cpu_s
from p1_stack import free_port
from scale_report import Point, with_speedups, write_plot, write_table
from tests.chaos.verifier import ResultsReader, verify

from inferstream.models.names import GPU_PROFILES

REPO = Path(__file__).resolve().parents[2]

_ASSIGNED = re.compile(r"(?:\[([\w.-]+)\] )?assigned partitions=\[([\d, ]*)\]")


def node_model(profile: str, node_rate: float, batch: int, factor: float = 1.0) -> str:
    """The `sim:` name of a node of `profile` doing `node_rate / factor` items/s at `batch`."""
    batch_ms, item_ms = GPU_PROFILES[profile]
    real_rate = batch / ((batch_ms + batch * item_ms) / 1000)
    return f"sim:as={profile},slower={real_rate / node_rate * factor:.2f}"


def assignments(fleet: Fleet, names: list[str]) -> Iterator[tuple[float, str, bool]]:
    """(Unix time, member, whether it got partitions) of each assignment the processes
    `names` logged, in log order per process."""
    for name in names:
        path = fleet.log_path(name)
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            match = _ASSIGNED.search(line)
            if match:
                yield _stamp(line), match[1] or name, bool(match[2].strip())


def _stamp(line: str) -> float:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def members_owning(fleet: Fleet, names: list[str]) -> int:
    """How many members of the processes `names` own partitions now (their last line)."""
    last = {member: owns for _, member, owns in assignments(fleet, names)}
    return sum(last.values())


def log_events(path: Path) -> list[tuple[float, str]]:
    """(Unix time, "assigned" or "revoked") of each ownership line of a worker log."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        match = re.search(r"(assigned|revoked) partitions=", line)
        if match:
            found.append((_stamp(line), match[1]))
    return found


def members_assigned_since(fleet: Fleet, names: list[str], since: float) -> int:
    """How many members of the processes `names` logged an assignment after `since`."""
    return len({member for t, member, _ in assignments(fleet, names) if t >= since})


def transactions(ports: dict[str, int]) -> int:
    """Transactions committed so far by the processes serving /metrics on `ports`: the
    controller's and the workers' commit-duration counts (a killed process counts 0)."""
    total = 0.0
    for port in ports.values():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            name = line.split("{")[0].split(" ")[0]
            if name in ("inferstream_commit_duration_seconds_count",
                        "inferstream_controller_commit_duration_seconds_count"):
                total += float(line.rsplit(" ", 1)[1])
    return int(total)


class Study:
    """The study's runs on one local broker."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.broker = start_broker(workdir / "kafka")
        self.broker_pid = self.broker.pid()
        self.points: list[Point] = []

    def close(self) -> None:
        self.broker.clean()

    # -- one job -------------------------------------------------------------------------
    def run(self, profile: str, nodes: int, run: str, packs: list[tuple[int, float]],
            kill: str | None = None, policy: bool = False, probe: bool = False) -> Point:
        """A job on processes `packs` ((members, slowness factor) each); `kill`: "solos"
        (every one-member process) or "pack" (the first many-member one), at a third of
        the job's ideal time."""
        args = self.args
        partitions = max(args.min_partitions, math.ceil(nodes * args.partitions_per_node))
        fleet = Fleet(self.broker.bootstrap, partitions, self.workdir, f"s{nodes}")
        fleet.create_topics()
        try:
            point = self._run(fleet, profile, nodes, run, packs, kill, policy)
            if probe:
                point.extra["rebalance_s"] = self._rebalance_time(fleet, profile, packs)
                print(f"rebalance of {nodes} members for one more: "
                      f"{point.extra['rebalance_s']:.1f} s", flush=True)
            return point
        finally:
            fleet.stop_all()
            if not args.keep_topics:
                fleet.delete_topics()

    def _run(self, fleet: Fleet, profile: str, nodes: int, run: str,
             packs: list[tuple[int, float]], kill: str | None, policy: bool) -> Point:
        ports, controller, names, join_s = self._start(fleet, profile, nodes, run, packs,
                                                       policy)
        time.sleep(self.args.settle_s)
        point = self._job(fleet, profile, nodes, run, packs, kill, ports, controller, names)
        point.join_s = join_s
        self.points.append(point)
        print(json.dumps(asdict(point)), flush=True)
        with (self.args.out / "scale_study.jsonl").open("a") as saved:  # kept if a later run fails
            saved.write(json.dumps(asdict(point)) + "\n")
        return point

    def _start(self, fleet: Fleet, profile: str, nodes: int, run: str,
               packs: list[tuple[int, float]], policy: bool
               ) -> tuple[dict[str, int], Popen[bytes], list[str], float]:
        """The controller and the members (sysinfo too with `policy`), once every node owns
        partitions: their metrics ports, the controller, the processes' names, the join time."""
        args = self.args
        if policy:
            fleet.sysinfo()
        ports = {"controller": free_port()}
        controller = fleet.start("controller", "controller", "--metrics-port",
                                 str(ports["controller"]))
        names, started = [], time.monotonic()
        for i, (members, factor) in enumerate(packs):
            name = f"p{i}"
            flags = ["--members", str(members)] if members > 1 else []
            if not policy:
                flags += ["--assignor", "roundrobin"] if run.startswith("mix") else []
            ports[name] = free_port()
            fleet.worker(name, node_model(profile, args.node_rate, args.batch, factor),
                         *flags, "--decode-threads", "1", "--max-batch", str(args.batch),
                         "--min-rebalance-interval-s", "10", "--metrics-port", str(ports[name]))
            names.append(name)
        while members_owning(fleet, names) < nodes:
            fleet.check_alive(*names)
            if time.monotonic() - started > args.join_timeout_s:
                raise SystemExit(f"{nodes} nodes did not all own partitions in "
                                 f"{args.join_timeout_s}s ({members_owning(fleet, names)} do)")
            time.sleep(1)
        return ports, controller, names, time.monotonic() - started

    def _job(self, fleet: Fleet, profile: str, nodes: int, run: str,
             packs: list[tuple[int, float]], kill: str | None, ports: dict[str, int],
             controller: Popen[bytes], names: list[str]) -> Point:
        """One job on the started fleet, checked exactly once, with its costs."""
        args = self.args
        capacity = sum(m / f for m, f in packs)  # node-equivalents
        ideal_rate = capacity * args.node_rate
        items = max(args.batch, round(args.job_s * ideal_rate))
        listing = write_listing(self.workdir / f"items-{nodes}-{len(self.points)}.txt", items,
                                f"{run[:4]}-{nodes}")
        reader = ResultsReader(fleet.config).start()
        cpu_before = cpu_s(controller.pid), self._broker_cpu()
        transactions_before = transactions(ports)
        t0, wall0 = time.monotonic(), time.time()
        job = fleet.client.submit(packs_model(profile), [f"@{listing}"],
                                  chunk_size=args.task_items)
        if kill is not None:
            self._kill_later(fleet, names, packs, kill, items / ideal_rate / 3)
        status = job.wait(timeout_s=args.job_timeout_s)
        seconds = time.monotonic() - t0
        cpu_after = cpu_s(controller.pid), self._broker_cpu()
        transactions_after = transactions(ports)
        reader.read_to_end(timeout_s=120)
        expected = [line.strip() for line in listing.read_text().splitlines()]
        committed = reader.snapshot()
        report = verify(job.job_id, expected, committed, list(job.results()))
        reader.close()
        spans = timeline(committed, job.job_id, wall0)
        print(f"timeline of {job.job_id}: {spans.line() if spans else 'no results'}", flush=True)
        return Point(profile=profile, nodes=nodes, run=run, items=items, seconds=seconds,
                     rate=status.ok_items / seconds, ideal_rate=ideal_rate,
                     exactly_once=not report.problems() and status.ok_items == items,
                     lost=report.lost, duplicates=report.duplicates,
                     controller_cpu_s=cpu_after[0] - cpu_before[0],
                     broker_cpu_s=cpu_after[1] - cpu_before[1],
                     tasks=math.ceil(items / args.task_items),
                     extra={"partitions": fleet.config.task_partitions_for(),
                            "transactions": transactions_after - transactions_before,
                            "timeline": asdict(spans) if spans else None})

    def _broker_cpu(self) -> float:
        return cpu_s(self.broker_pid) if self.broker_pid else 0.0

    def _rebalance_time(self, fleet: Fleet, profile: str, packs: list[tuple[int, float]]
                        ) -> float:
        """One more member joins the settled group: from the first revoke that its join
        caused to the last member's new assignment (all members' log lines)."""
        names = [f"p{i}" for i in range(len(packs))]
        joined = time.time()
        fleet.worker("joiner", node_model(profile, self.args.node_rate, self.args.batch),
                     "--decode-threads", "1", "--max-batch", str(self.args.batch))
        nodes = sum(m for m, _ in packs) + 1  # (one may get no partition: that is an answer)
        deadline = time.monotonic() + self.args.join_timeout_s
        while members_assigned_since(fleet, [*names, "joiner"], joined) < nodes:
            if time.monotonic() > deadline:
                return float("nan")  # reported as such; the study goes on
            time.sleep(0.5)
        time.sleep(2)
        stamps = [(t, kind) for name in [*names, "joiner"]
                  for t, kind in log_events(fleet.log_path(name)) if t >= joined]
        revokes = [t for t, kind in stamps if kind == "revoked"]
        assigns = [t for t, kind in stamps if kind == "assigned"]
        return max(assigns) - min(revokes) if revokes and assigns else float("nan")

    def _kill_later(self, fleet: Fleet, names: list[str], packs: list[tuple[int, float]],
                    kill: str, after_s: float) -> None:
        time.sleep(after_s)
        victims = [n for n, (members, _) in zip(names, packs, strict=True)
                   if (members == 1) == (kill == "solos")]
        for name in victims if kill == "solos" else victims[:1]:
            fleet.procs[name].send_signal(signal.SIGKILL)

    # -- the study -------------------------------------------------------------------------
    def packs(self, nodes: int, factors: list[float] | None = None) -> list[tuple[int, float]]:
        """Processes of up to `--members-per-process` members of one slowness each."""
        size = self.args.members_per_process
        factors = factors or [1.0] * nodes
        out: list[tuple[int, float]] = []
        for factor in sorted(set(factors)):
            count = factors.count(factor)
            out += [(min(size, count - i), factor) for i in range(0, count, size)]
        return out

    def sweep(self, profile: str) -> None:
        base: Point | None = None
        for nodes in self.args.nodes:
            point = self.run(profile, nodes, "sweep", self.packs(nodes),
                             probe=nodes == max(self.args.nodes) and self.args.probe)
            base = base or point
            point.speedup = point.rate / base.rate * base.nodes
            point.efficiency = point.speedup / nodes

    def outages(self, profile: str) -> None:
        nodes = max(self.args.nodes)
        clean = next(p for p in self.points if p.profile == profile and p.nodes == nodes
                     and p.run == "sweep")
        solos = max(1, nodes // 10)
        mixed = [(1, 1.0)] * solos + self.packs(nodes - solos)
        for run, kill, packs in (("kill 10% of members", "solos", mixed),
                                 ("kill a member process", "pack", self.packs(nodes))):
            point = self.run(profile, nodes, run, packs, kill=kill)
            point.time_lost_s = point.seconds - point.items / clean.rate

    def mix(self, profile: str) -> None:
        nodes = max(self.args.nodes)
        factors = [1.0] * (nodes // 2) + [2.0] * (nodes * 3 // 10)
        factors += [4.0] * (nodes - len(factors))
        for run, policy in (("mix, policy assignor", True), ("mix, round robin", False)):
            point = self.run(profile, nodes, run, self.packs(nodes, factors), policy=policy)
            point.efficiency = point.rate / point.ideal_rate


def packs_model(profile: str) -> str:
    """The model a job asks for: every `sim:` worker serves any `sim:` job."""
    return f"sim:as={profile}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 10, 20, 40, 60, 80, 100])
    parser.add_argument("--profiles", nargs="+", default=list(GPU_PROFILES),
                        choices=list(GPU_PROFILES))
    parser.add_argument("--node-rate", type=float, default=20.0,
                        help="items/s of one node at --batch (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--task-items", type=int, default=64, help="items per task")
    parser.add_argument("--job-s", type=float, default=60.0,
                        help="each job's length at its ideal rate (default: %(default)s)")
    parser.add_argument("--members-per-process", type=int, default=25)
    parser.add_argument("--partitions-per-node", type=float, default=1.0)
    parser.add_argument("--min-partitions", type=int, default=4)
    parser.add_argument("--settle-s", type=float, default=3.0)
    parser.add_argument("--join-timeout-s", type=float, default=300.0)
    parser.add_argument("--job-timeout-s", type=float, default=900.0)
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--no-outage", action="store_true")
    parser.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True,
                        help="time one rebalance at the largest N (one more member joins)")
    parser.add_argument("--no-mix", action="store_true")
    parser.add_argument("--keep-topics", action="store_true",
                        help="leave each job's topics on the broker (until 2026-12-05 every "
                        "run's were kept: a sweep's last N paid for every earlier N's)")
    parser.add_argument("--out", type=Path, default=REPO / "ops" / "bench" / "results")
    parser.add_argument("--replot", action="store_true",
                        help="run nothing: the table and the plot of every job in "
                        "OUT/scale_study.jsonl (what the runs so far measured)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[Point]:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        saved = (args.out / "scale_study.jsonl").read_text().splitlines()
        points = with_speedups([Point(**json.loads(line)) for line in saved if line.strip()])
        print(write_table(points, args.out / "scale_study.md", "python ops/bench/"
                          "scale_study.py --replot (the jobs of the runs above)"))
        write_plot(points, args.out / "scale_study.png")
        return points
    with tempfile.TemporaryDirectory(prefix="scale-study-") as tmp:
        study = Study(args, Path(tmp))
        try:
            for profile in args.profiles:
                if not args.no_sweep:
                    study.sweep(profile)
                if not (args.no_outage or args.no_sweep):  # its reference is the sweep's
                    study.outages(profile)
                if not args.no_mix:
                    study.mix(profile)
        finally:
            study.close()
    command = "python ops/bench/scale_study.py " + " ".join(argv if argv is not None
                                                            else sys.argv[1:])
    print(write_table(study.points, args.out / "scale_study.md", command.strip()))
    write_plot(study.points, args.out / "scale_study.png")
    print(f"table: {args.out / 'scale_study.md'}, plot: {args.out / 'scale_study.png'}")
    return study.points


if __name__ == "__main__":
    main()
