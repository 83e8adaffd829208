"""Benchmark: end-to-end throughput of one job over SASL_SSL against PLAINTEXT (issue 28).

Two one-broker clusters started by ops/kafka/cluster in this run, one `--security plaintext`
and one `--security sasl_ssl` (SCRAM-SHA-512 over TLS, StandardAuthorizer, nothing allowed
without an ACL). On each, under a topic prefix of its own, one controller and one worker on
`sim:ms=0` (no compute: what is left is the Kafka path), on the secured cluster each as its
role's principal holding only the ACLs `inferstream acls --apply` gave it (as admin), the
client as User:client. After a warm-up job on each side, jobs of `--items` items are timed
from submit to the client seeing them complete, the sides alternated (the first side swaps
every repeat). Each job must complete with every item ok. The table gives each run's items/s,
each side's median and the ratio of the medians (sasl_ssl / plaintext), and the CPU time the
broker's JVM, the controller and the worker spent per 1,000 items (from /proc across each
job; the median of the runs), which the host's load disturbs less than a rate does.

    .venv/bin/python ops/bench/secure_throughput.py [--items 4000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from failover_common import source_version, write_listing
from p1_stack import CLUSTER, INFERSTREAM, BenchError

from inferstream.client.client import Client
from inferstream.config import Config, load_config
from inferstream.kafka.topics import ensure_topics

SIDES = ("plaintext", "sasl_ssl")
MODEL = "sim:ms=0"
PROCESSES = ("broker", "controller", "worker")


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of process `pid` so far (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Run:
    """One timed job: items per second, and CPU ms per 1,000 items of each process."""

    rate: float
    cpu_ms_per_item: dict[str, float]
#: The principal of each process on the secured cluster (admin creates topics and ACLs).
ROLES = ("controller", "worker", "client")


@dataclass
class Side:
    """A cluster of one broker and, under a topic prefix of their own, a controller and a
    worker; the client that submits and follows the jobs."""

    security: str
    directory: Path
    partitions: int
    bootstrap: str = ""
    prefix: str = field(default_factory=lambda: f"sec-{uuid.uuid4().hex[:6]}.")
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start_cluster(self) -> None:
        done = subprocess.run([*CLUSTER, "start", "--dir", str(self.directory), "--port",
                               "auto", "--security", self.security], capture_output=True,
                              text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise BenchError(f"cannot start the {self.security} cluster: {done.stderr[-2000:]}")
        self.bootstrap = done.stdout.strip().splitlines()[-1]

    def clean(self) -> None:
        subprocess.run([*CLUSTER, "clean", "--dir", str(self.directory)],
                       capture_output=True, timeout=180, check=False)

    def pids(self) -> dict[str, int]:
        done = subprocess.run([*CLUSTER, "status", "--dir", str(self.directory), "--json"],
                              capture_output=True, text=True, timeout=60, check=False)
        broker: int = json.loads(done.stdout)["nodes"][0]["pid"]
        return {"broker": broker, **{role: proc.pid for role, proc in self.procs.items()}}

    def environ(self, user: str) -> dict[str, str]:
        """How `user`'s process connects: its settings file on the secured cluster."""
        env = {"INFERSTREAM_BOOTSTRAP_SERVERS": self.bootstrap,
               "INFERSTREAM_TOPIC_PREFIX": self.prefix,
               "INFERSTREAM_PARTITIONS": str(self.partitions),
               "INFERSTREAM_TASK_PARTITIONS": str(self.partitions)}
        if self.security != "plaintext":
            env["INFERSTREAM_CONFIG"] = str(self.directory / "clients" / f"{user}.toml")
        return env

    def config(self, user: str) -> Config:
        return load_config(environ=self.environ(user))

    def grant(self) -> None:
        """Topics as admin, then each role's ACLs for its principal (secured cluster)."""
        report = ensure_topics(self.config("admin"))
        if not report.ok:
            raise BenchError(f"topics mismatch: {report.mismatched}")
        if self.security == "plaintext":
            return
        for role in ROLES:
            self.inferstream("admin", "acls", "--principal", f"User:{role}", "--role", role,
                             "--apply")

    def inferstream(self, user: str, *args: str) -> None:
        done = subprocess.run([*INFERSTREAM, *args], capture_output=True, text=True,
                              env={**os.environ, **self.environ(user)}, timeout=120,
                              check=False)
        if done.returncode != 0:
            raise BenchError(f"inferstream {shlex.join(args)}: {done.stderr[-2000:]}")

    def spawn(self, role: str, *args: str) -> None:
        # restart off: a failure is the run's, not hidden by a restart
        env = {**os.environ, **self.environ(role), "PYTHONUNBUFFERED": "1",
               "INFERSTREAM_RESTART": "off"}
        with open(self.log(role), "wb") as log:
            self.procs[role] = subprocess.Popen([*INFERSTREAM, role, *args], stdout=log,
                                                stderr=subprocess.STDOUT, env=env)

    def log(self, role: str) -> Path:
        return self.directory.parent / f"{self.security}-{role}.log"

    def start_roles(self, timeout_s: float = 300) -> None:
        self.spawn("controller")
        self.spawn("worker", "--model", MODEL, "--worker-id", f"bench-{self.security}")
        deadline = time.monotonic() + timeout_s
        while "assigned partitions=[" not in self.log("worker").read_text().replace("=[]", ""):
            for role, proc in self.procs.items():
                if proc.poll() is not None:
                    raise BenchError(f"{role} exited with {proc.returncode}: "
                                     f"{self.log(role).read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise BenchError(f"the {self.security} worker got no partition")
            time.sleep(0.2)

    def run_job(self, client: Client, listing: Path, items: int, chunk: int | None) -> Run:
        """One job, from its submit to the client seeing it complete."""
        pids = self.pids()
        before = {name: cpu_s(pid) for name, pid in pids.items()}
        started = time.perf_counter()
        job = client.submit(MODEL, [f"@{listing}"], chunk_size=chunk)
        status = job.wait(timeout_s=1800)
        took_s = time.perf_counter() - started
        if status.ok_items != items:
            raise BenchError(f"{self.security} job {job.job_id}: {status.ok_items} ok of "
                             f"{items}")
        return Run(items / took_s, {name: (cpu_s(pid) - before[name]) * 1e6 / items
                                    for name, pid in pids.items()})

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ops/bench/secure_throughput.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=4000, help="items of each timed job")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed jobs on each side, alternated (at least 3 for a median)")
    parser.add_argument("--warmup-items", type=int, default=400)
    parser.add_argument("--chunk-size", type=int, default=0,
                        help="items per task (0: the controller's default_chunk_size)")
    parser.add_argument("--partitions", type=int, default=4,
                        help="partitions of every topic and of the task topic")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the clusters and logs go (default: a temporary folder, "
                        "deleted at the end)")
    return parser.parse_args(argv)


def summary(runs: dict[str, list[Run]]) -> dict[str, float]:
    """Each side's median items/s and the ratio of the medians (sasl_ssl / plaintext)."""
    medians = {side: statistics.median(run.rate for run in values)
               for side, values in runs.items()}
    return {**medians, "ratio": medians["sasl_ssl"] / medians["plaintext"]}


def median_cpu(runs: list[Run]) -> dict[str, float]:
    """CPU ms per 1,000 items of each process, the median of the runs for each."""
    return {name: statistics.median(run.cpu_ms_per_item[name] for run in runs)
            for name in PROCESSES}


def table(runs: dict[str, list[Run]], loads: list[float]) -> str:
    figures = summary(runs)
    lines = ["| side | items/s, each run (in order) | median | CPU ms per 1,000 items: "
             "broker, controller, worker (median) |", "|---|---|---|---|"]
    for side in SIDES:
        rates = ", ".join(f"{run.rate:.0f}" for run in runs[side])
        cpu = ", ".join(f"{ms:.0f}" for ms in median_cpu(runs[side]).values())
        lines.append(f"| {side} | {rates} | {figures[side]:.0f} | {cpu} |")
    lines.append(f"\nratio of the medians, sasl_ssl / plaintext: {figures['ratio']:.3f}; "
                 f"load average at each run: {', '.join(f'{x:.1f}' for x in loads)}")
    return "\n".join(lines)


def measure(args: argparse.Namespace, sides: dict[str, Side]) -> dict[str, list[Run]]:
    """Warm each side up, then time `repeats` jobs on each, alternated."""
    logs = next(iter(sides.values())).directory.parent
    listing = write_listing(logs / "items.txt", args.items, "item")
    warmup = write_listing(logs / "warmup.txt", args.warmup_items, "warm")
    chunk = args.chunk_size or None
    clients = {name: Client(side.config("client")) for name, side in sides.items()}
    for name, side in sides.items():
        side.run_job(clients[name], warmup, args.warmup_items, chunk)
    runs: dict[str, list[Run]] = {name: [] for name in sides}
    loads = []
    for repeat in range(args.repeats):
        for name in SIDES if repeat % 2 == 0 else SIDES[::-1]:
            loads.append(os.getloadavg()[0])
            runs[name].append(sides[name].run_job(clients[name], listing, args.items, chunk))
            print(f"run {repeat + 1} {name}: {runs[name][-1].rate:.0f} items/s",
                  file=sys.stderr)
    print(table(runs, loads))
    return runs


def run(args: argparse.Namespace, workdir: Path) -> dict[str, list[Run]]:
    sides = {name: Side(name, workdir / name, args.partitions) for name in SIDES}
    try:
        for side in sides.values():
            side.start_cluster()
            side.grant()
            side.start_roles()
        return measure(args, sides)
    finally:
        for side in sides.values():
            side.stop()
            side.clean()


def main(argv: list[str] | None = None) -> dict[str, list[Run]]:
    given = sys.argv[1:] if argv is None else argv
    args = parse_args(given)
    print(f"# {shlex.join(['ops/bench/secure_throughput.py', *given])} at {source_version()}, "
          f"{os.cpu_count()} cores", flush=True)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return run(args, args.workdir)
    with tempfile.TemporaryDirectory(prefix="secure-bench-") as tmp:
        return run(args, Path(tmp))


if __name__ == "__main__":
    main()
