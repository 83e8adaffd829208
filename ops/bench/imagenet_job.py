"""Benchmark: a job of ImageNet's size end to end (issue 30.1), and its memory as jobs grow.

On one local broker (started by ops/kafka/cluster, or `--bootstrap` of a running one), one
controller and one worker process with `--members 8` on `sim:ms=0` (no compute: what is left is
the Kafka path; `--worker-processes P` shares the members among P processes) take a job of
`--items` items (ImageNet's 1,281,167 training images by default; a comma-separated list runs
one job per size, each with a controller and worker of its own on a topic prefix of its own)
from an @LIST file of ImageNet-like paths, submitted as a user would: `inferstream submit
--wait --output FILE`. Reported per job: items/s (submit's start to its exit, output written),
tasks issued and re-issued (attempt > 1: the controller's
`inferstream_controller_tasks_reissued_total` by reason, and its log's "re-issued as attempt"
lines), peak RSS of the controller and the worker (VmHWM of /proc/PID/status, read after the
job) and of the client (`submit`'s and `results`'s own, `child_usage.py`), CPU seconds per item
of the broker's JVM, the controller, the worker and submit (/proc/PID/stat utime + stime across
the job; the client's from its wait4), and a check of submit's output file and of `inferstream
results JOB --output FILE` (every item exactly once, all ok), and the entries of the
controller's ledger after it (what compaction leaves, and a standby copy holds). With
`--one-fleet` the jobs run one after another on one controller and worker: what a replica keeps
across jobs. The load average is printed at the start and the end: other sessions may share the
machine.

    .venv/bin/python ops/bench/imagenet_job.py [--items 1281167] [--members 8]
        [--worker-processes 1]
        [--bootstrap HOST:PORT] [--task-partitions 120] [--workdir DIR] [--one-fleet]
        [--chunk-size N] [--sysinfo]

With `--sysinfo` a sysinfo app runs beside them, as the README deploys it, and the job waits
for its policy's task size: tasks are sized by the policy (about 1 s of a member's work, at
most the controller's `max_chunk_size`) instead of the controller's `default_chunk_size`.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from child_usage import run_measured
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from failover_common import Fleet, source_version, start_broker
from imagenet_items import IMAGENET_TRAIN, OutputCheck, check_output, write_imagenet_listing
from p1_cpu import status_mib
from p1_stack import INFERSTREAM, BenchError, free_port
from secure_throughput import cpu_s

from inferstream.client.client import Client
from inferstream.kafka.reader import PartitionReader, reader_consumer, topic_partitions
from inferstream.policy.table import PolicyTable

_COUNTER = re.compile(r'^(inferstream_controller_tasks_(?:issued|reissued)_total)\{([^}]*)\} '
                      r'([0-9.e+]+)$', re.MULTILINE)
_REASON = re.compile(r'reason="([^"]*)"')


def reissue_counters(metrics_text: str) -> tuple[int, dict[str, int]]:
    """Tasks issued (first attempts) and tasks re-issued by reason, from a controller's
    /metrics page."""
    issued = 0
    reissued: dict[str, int] = {}
    for name, labels, value in _COUNTER.findall(metrics_text):
        if name.endswith("_reissued_total"):
            reason = _REASON.search(labels)
            key = reason[1] if reason else "?"
            reissued[key] = reissued.get(key, 0) + int(float(value))
        else:
            issued += int(float(value))
    return issued, reissued


def peak_rss_mib(pid: int) -> float:
    """The peak resident set of a live process so far, MiB (VmHWM)."""
    return status_mib(pid, "VmHWM")


@dataclass(frozen=True)
class ChildRun:
    """A client command run to its end: wall seconds, CPU seconds, peak RSS MiB, stdout."""

    seconds: float
    cpu_s: float
    peak_mib: float
    stdout: str


@dataclass
class Measured:
    """One job's figures."""

    items: int
    seconds: float = 0.0
    #: the job's own rate, acceptance to completion (its COMPLETED event)
    job_rate: float = 0.0
    #: `results JOB --output FILE` from start to exit
    read_s: float = 0.0
    issued: int = 0
    reissued: dict[str, int] = field(default_factory=dict)
    logged_reissues: int = 0
    peak_mib: dict[str, float] = field(default_factory=dict)
    cpu_s_per_item: dict[str, float] = field(default_factory=dict)
    checks: dict[str, OutputCheck] = field(default_factory=dict)
    loads: tuple[float, float] = (0.0, 0.0)
    #: entries of the controller's ledger after the job (`ledger_entries`)
    ledger_entries: int = 0


class JobFleet(Fleet):
    """A controller and worker processes under a topic prefix of their own; client commands
    run as children whose own resource use is measured."""

    def __init__(self, bootstrap: str, partitions: int, task_partitions: int, logdir: Path,
                 tag: str) -> None:
        super().__init__(bootstrap, partitions, logdir, tag)
        self.config = replace(self.config, task_partitions=task_partitions)
        self.client = Client(self.config)
        #: the worker processes' names (and worker ids), in the order started
        self.workers: list[str] = []

    def start_workers(self, model: str, members: int, processes: int) -> None:
        """`processes` worker processes sharing `members` members (the first takes what
        does not divide evenly)."""
        for number in range(processes):
            name = "w" if number == 0 else f"w{number + 1}"
            share = members // processes + (members % processes if number == 0 else 0)
            self.worker(name, model, "--members", str(share))
            self.workers.append(name)

    def run_client(self, name: str, *args: str) -> ChildRun:
        """`inferstream ARGS` to its end; BenchError unless it exits 0."""
        out, log = self.log_path(f"{name}.out"), self.log_path(name)
        started = time.perf_counter()
        with out.open("wb") as stdout, log.open("wb") as stderr:
            run = run_measured([*INFERSTREAM, *args], self.log_path(f"{name}.usage"), stdout,
                               stderr, self._env())
        if run.returncode != 0:
            raise BenchError(f"{name} exited {run.returncode}: {log.read_text()[-2000:]}")
        return ChildRun(time.perf_counter() - started, run.cpu_s, run.peak_rss_mib,
                        out.read_text())


def run_job(fleet: JobFleet, broker_pid: int, items: int, model: str,
            chunk_size: int | None = None) -> Measured:
    """Submit one job of `items` items with --wait --output, then read it with `results`."""
    measured = Measured(items, loads=(os.getloadavg()[0], 0.0))
    listing = write_imagenet_listing(fleet.logdir / f"items-{items}.txt", items)
    pids = {"broker": broker_pid, "controller": fleet.procs["controller"].pid}
    pids.update({name: fleet.procs[name].pid for name in fleet.workers})
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    output = fleet.logdir / f"submit-{items}.jsonl"
    submit = fleet.run_client("submit", "submit", "--model", model, "--input", f"@{listing}",
                              *(["--chunk-size", str(chunk_size)] if chunk_size else []),
                              "--wait", "--output", str(output))
    spent = {name: (cpu_s(pid) - before[name]) / items for name, pid in pids.items()}
    measured.cpu_s_per_item = {"broker": spent["broker"], "controller": spent["controller"],
                               "worker": sum(spent[name] for name in fleet.workers),
                               "submit": submit.cpu_s / items}
    measured.seconds = submit.seconds
    measured.peak_mib = {"controller": peak_rss_mib(pids["controller"]),
                         "worker": max(peak_rss_mib(pids[name]) for name in fleet.workers)}
    measured.peak_mib["controller now"] = status_mib(pids["controller"], "VmRSS")
    measured.peak_mib["submit"] = submit.peak_mib
    measured.loads = (measured.loads[0], os.getloadavg()[0])
    return measured


def audit(fleet: JobFleet, measured: Measured, job_id: str, metrics_port: int) -> None:
    """The job's own rate, re-issues from the controller's metrics and log; both output
    files checked."""
    final = fleet.client.job(job_id).wait_final(timeout_s=120)
    measured.job_rate = final.rate_items_per_s or 0.0
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                timeout=30) as page:
        measured.issued, measured.reissued = reissue_counters(page.read().decode())
    measured.logged_reissues = fleet.log_path("controller").read_text(
        errors="replace").count("re-issued as attempt")
    output = fleet.logdir / f"submit-{measured.items}.jsonl"
    measured.checks["submit"] = check_output(output, measured.items)
    output.unlink()
    read = fleet.logdir / f"results-{measured.items}.jsonl"
    results = fleet.run_client("results", "results", job_id, "--output", str(read))
    measured.peak_mib["results"] = results.peak_mib
    measured.read_s = results.seconds
    measured.checks["results"] = check_output(read, measured.items)
    read.unlink()
    measured.ledger_entries = ledger_entries(fleet)


def ledger_entries(fleet: JobFleet) -> int:
    """The entries of the fleet's controller ledger: the latest value of each key, less the
    keys deleted (tombstones), as compaction leaves them and a standby copy holds them."""
    topic = fleet.config.topic("controller-ledger")
    consumer = reader_consumer(fleet.config)
    live: set[tuple[int, bytes]] = set()
    try:
        partitions = topic_partitions(consumer, topic)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        for message in PartitionReader(consumer, partitions, timeout_s=300).messages():
            key = (message.partition() or 0, message.key() or b"")
            (live.discard if message.value() is None else live.add)(key)  # None: deleted
    finally:
        consumer.close()
    return len(live)


def measure_fleet(bootstrap: str, broker_pid: int, args: argparse.Namespace, logdir: Path,
                  sizes: list[int]) -> list[Measured]:
    """One job of each of `sizes`, one after another, on one controller and worker."""
    fleet = JobFleet(bootstrap, args.partitions, args.task_partitions, logdir,
                     f"imagenet{sizes[0]}")
    try:
        fleet.create_topics()
        port = free_port()
        if args.sysinfo:
            fleet.sysinfo()
        fleet.start("controller", "controller", "--metrics-port", str(port))
        fleet.start_workers(args.model, args.members, args.worker_processes)
        fleet.wait_for_members(args.members, 600, "controller", *fleet.workers)
        if args.sysinfo:
            wait_for_task_size(fleet, args.model)
        rows: list[Measured] = []
        for items in sizes:
            measured = run_job(fleet, broker_pid, items, args.model, args.chunk_size)
            job_id = fleet.log_path("submit.out").read_text().split()[0]
            audit(fleet, measured, job_id, port)
            rows.append(since_last(measured, rows))
            print(table(rows[-1:]), file=sys.stderr, flush=True)
        return rows
    finally:
        fleet.stop_all()


def wait_for_task_size(fleet: JobFleet, model: str, timeout_s: float = 180) -> None:
    """With the sysinfo app: wait until its policy has a task size for `model` on the pool,
    as a controller that accepts the job reads it."""
    table = PolicyTable(fleet.config, max_age_s=fleet.config.worker.policy_max_age_s)
    table.start()
    try:
        deadline = time.monotonic() + timeout_s
        while (size := table.task_size(fleet.config.pool, model)) is None:
            if time.monotonic() > deadline:
                raise BenchError(f"no task size for {model} in the policy after {timeout_s} s")
            time.sleep(0.5)
        print(f"the policy's task size for {model}: {size} items", file=sys.stderr, flush=True)
    finally:
        table.stop()


def since_last(measured: Measured, earlier: list[Measured]) -> Measured:
    """`measured` with the controller's counters (cumulative on one fleet) less those of the
    jobs before it."""
    for row in earlier:
        measured.issued -= row.issued
        measured.logged_reissues -= row.logged_reissues
        for reason, count in row.reissued.items():
            measured.reissued[reason] = measured.reissued.get(reason, 0) - count
    return measured


def table(rows: list[Measured]) -> str:
    """The figures of each job, a Markdown table."""
    lines = ["| items | submit s | items/s | job items/s | results s | tasks issued | "
             "re-issued (metrics, by reason) | re-issued (log) | peak RSS MiB: controller, "
             "worker, submit, results | controller RSS MiB after | ledger entries | "
             "CPU us per item: broker, controller, worker, submit | output checks | load |",
             "|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---|---|---|"]
    for row in rows:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(row.reissued.items()) if v) or "0"
        share = sum(row.reissued.values()) / row.issued if row.issued else 0.0
        peaks = ", ".join(f"{row.peak_mib.get(k, 0):.0f}"
                          for k in ("controller", "worker", "submit", "results"))
        cpu = ", ".join(f"{row.cpu_s_per_item[k] * 1e6:.0f}"
                        for k in ("broker", "controller", "worker", "submit"))
        checks = "; ".join(f"{k} {'ok' if c.passed else c}" for k, c in row.checks.items())
        lines.append(f"| {row.items:,} | {row.seconds:.1f} | {row.items / row.seconds:,.0f} | "
                     f"{row.job_rate:,.0f} | {row.read_s:.1f} | {row.issued:,} | {reasons} "
                     f"({share:.2%}) | {row.logged_reissues} | {peaks} | "
                     f"{row.peak_mib.get('controller now', 0):.0f} | {row.ledger_entries:,} | "
                     f"{cpu} | {checks} | "
                     f"{row.loads[0]:.1f} -> {row.loads[1]:.1f} |")
    return "\n".join(lines)


def sizes(text: str) -> list[int]:
    """`--items`: one size or a comma-separated list, each >= 1."""
    values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"item counts >= 1, comma-separated: {text!r}")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ops/bench/imagenet_job.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=sizes, default=[IMAGENET_TRAIN],
                        help="items of the job; a comma-separated list runs one job per size")
    parser.add_argument("--members", type=int, default=8,
                        help="group members of the worker processes, together")
    parser.add_argument("--worker-processes", type=int, default=1,
                        help="worker processes sharing the members (the worker's CPU is "
                        "theirs summed, its peak RSS the largest)")
    parser.add_argument("--model", default="sim:ms=0")
    parser.add_argument("--partitions", type=int, default=12,
                        help="partitions of the jobs, results and events topics")
    parser.add_argument("--task-partitions", type=int, default=120,
                        help="partitions of the pool's task topic")
    parser.add_argument("--bootstrap", default="",
                        help="a running broker's bootstrap HOST:PORT on this machine "
                        "(default: start one with ops/kafka/cluster)")
    parser.add_argument("--one-fleet", action="store_true",
                        help="run the jobs one after another on one controller and worker "
                        "(default: a controller and worker for each)")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="items per task (default: the controller's task size)")
    parser.add_argument("--sysinfo", action="store_true",
                        help="run the sysinfo app too, as the README deploys it: tasks are "
                        "sized by its policy (capped by the controller's max_chunk_size)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the logs, lists and outputs go (default: a temporary "
                        "folder, deleted at the end)")
    return parser.parse_args(argv)


def listening_pid(bootstrap: str) -> int:
    """The process of this machine listening at `bootstrap`'s port (a running broker)."""
    port = bootstrap.rsplit(":", 1)[1]
    listening = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True,
                               text=True, timeout=30, check=False).stdout
    found = re.search(r"pid=(\d+),", listening)
    if found is None:
        raise BenchError(f"no process of this machine listens at {bootstrap}")
    return int(found[1])


def run(args: argparse.Namespace, workdir: Path) -> list[Measured]:
    broker = None if args.bootstrap else start_broker(workdir / "kafka")
    try:
        bootstrap = broker.bootstrap if broker else args.bootstrap
        broker_pid = broker.pid() if broker else listening_pid(bootstrap)
        if broker_pid is None:
            raise BenchError("the broker has no process")
        fleets = [args.items] if args.one_fleet else [[items] for items in args.items]
        return [row for sizes in fleets
                for row in measure_fleet(bootstrap, broker_pid, args, workdir, sizes)]
    finally:
        if broker:
            broker.clean()


def banner(script: str, given: list[str]) -> str:
    """The first line of a report: the command, the code, the cores, the time, the load."""
    return (f"# {shlex.join([script, *given])} at {source_version()}, {os.cpu_count()} "
            f"cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at "
            f"start {os.getloadavg()[0]:.1f}")


def main(argv: list[str] | None = None) -> list[Measured]:
    given = sys.argv[1:] if argv is None else argv
    args = parse_args(given)
    print(banner("ops/bench/imagenet_job.py", given), flush=True)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        rows = run(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="imagenet-job-") as tmp:
            rows = run(args, Path(tmp))
    print(table(rows))
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}; members {args.members} in "
          f"{args.worker_processes} worker process(es), "
          f"task partitions {args.task_partitions}; submit s: submit --wait --output from "
          f"start to exit (items/s over it), job items/s: the controller's, acceptance to "
          f"completion; peak RSS from VmHWM (controller, worker) and the clients' own "
          f"ru_maxrss (submit, results; child_usage.py), the controller's after each job from VmRSS"
          f"{'; one controller and worker for all jobs' if args.one_fleet else ''}")
    return rows


if __name__ == "__main__":
    main()
