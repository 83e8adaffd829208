"""Where the broker's work goes with N simulated nodes (issue 30.4): requests by type and
records appended by topic, per second while the pool is idle and per task during one job,
with the broker's CPU beside them.

The fleet is the scale study's (`scale_study.py`: N members packed 25 a process, one task
partition each, a controller, `sim:as=alexnet` at 20 items/s a node, tasks of 64 items). The
request counts are the broker's own (`kafka.network:RequestMetrics`, read over JMX with
Kafka's JmxTool); the records appended are the growth of every partition's end offset
(transaction markers and the internal topics included). Each tree of `--src` (the fleet's
PYTHONPATH; `installed`: the package this Python imports) runs on a broker of its own, in
turn, `--rounds` times: the broker's CPU moves by a tenth between runs of the same code on
this shared machine, the counts do not.

    python ops/bench/broker_requests.py                  # 100 members, 20 s idle, 120,000 items
    python ops/bench/broker_requests.py --src /tmp/base/src --src installed --rounds 3
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))
from failover_common import Fleet, start_broker, write_listing
from localkafka.common import DEFAULT_JVM_OPTS
from p1_cpu import process_cpu_s as cpu_s
from p1_stack import CLUSTER, BenchError, free_port
from scale_study import members_owning, node_model, packs_model

_COUNT = re.compile(r"request=(\w+),version=\d+:Count=(\d+)")
REQUESTS = "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=*"
#: The broker counts a consumer's or a follower broker's Fetch under these as well.
PARTS_OF_FETCH = ("FetchConsumer", "FetchFollower")


def parse_counts(text: str) -> dict[str, int]:
    """Requests served so far by type, every version summed, from JmxTool's properties
    (a Fetch once, not again as the consumer's or follower's it also is)."""
    counts: dict[str, int] = {}
    for name, count in _COUNT.findall(text):
        if name not in PARTS_OF_FETCH:
            counts[name] = counts.get(name, 0) + int(count)
    return counts


def request_counts(jmx_port: int) -> dict[str, int]:
    proc = subprocess.run(
        [*CLUSTER, "tool", "org.apache.kafka.tools.JmxTool", "--jmx-url",
         f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{jmx_port}/jmxrmi", "--object-name",
         REQUESTS, "--attributes", "Count", "--one-time", "true", "--report-format",
         "properties"], capture_output=True, text=True, timeout=120, check=False)
    counts = parse_counts(proc.stdout)
    if not counts:
        raise BenchError(f"JmxTool read no request counts: {proc.stderr.strip()[-1000:]}")
    return counts


def log_ends(bootstrap: str, prefix: str) -> dict[str, int]:
    """The sum of every partition's end offset, by topic (the fleet's without `prefix`)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "broker-requests"})
    try:
        ends: dict[str, int] = {}
        for name, topic in consumer.list_topics(timeout=30).topics.items():
            for partition in topic.partitions:
                _, high = consumer.get_watermark_offsets(TopicPartition(name, partition),
                                                         timeout=30)
                key = name.removeprefix(prefix)
                ends[key] = ends.get(key, 0) + high
        return ends
    finally:
        consumer.close()


def grown(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}


@dataclass
class Run:
    src: str
    idle_s: float = 0.0
    idle_cpu_s: float = 0.0
    idle_requests: dict[str, int] = field(default_factory=dict)
    job_s: float = 0.0
    job_cpu_s: float = 0.0
    tasks: int = 0
    job_requests: dict[str, int] = field(default_factory=dict)
    appended: dict[str, int] = field(default_factory=dict)

    def lines(self) -> Iterator[str]:
        """The run as text: the idle pool per second; with a job, its costs per task."""
        head = (f"{self.src}: idle {100 * self.idle_cpu_s / self.idle_s:.1f} % of a core, "
                f"{sum(self.idle_requests.values()) / self.idle_s:.0f} requests/s")
        tasks = self.tasks or 1  # no job: its columns read 0
        if self.tasks:
            head += (f"; job {self.job_s:.1f} s, broker {1000 * self.job_cpu_s / tasks:.2f} "
                     f"ms of CPU a task, {sum(self.job_requests.values()) / tasks:.1f} "
                     f"requests and {sum(self.appended.values()) / tasks:.1f} records "
                     "appended a task")
        yield head
        for name in sorted(self.idle_requests | self.job_requests,
                           key=lambda n: (-self.idle_requests.get(n, 0),
                                          -self.job_requests.get(n, 0))):
            yield (f"  {name:32} idle {self.idle_requests.get(name, 0) / self.idle_s:7.1f}/s"
                   f"   job {self.job_requests.get(name, 0) / tasks:6.2f}/task")
        for topic, count in sorted(self.appended.items(), key=lambda kv: -kv[1]):
            yield f"  appended to {topic:28} {count / tasks:6.2f}/task"


def start_fleet(fleet: Fleet, nodes: int, per_process: int) -> list[str]:
    """The controller and `nodes` members, `per_process` a process, once each owns a
    partition; the processes' names."""
    fleet.start("controller", "controller")
    names = []
    for i in range(0, nodes, per_process):
        members = min(per_process, nodes - i)
        name = f"p{i // per_process}"
        fleet.worker(name, node_model("alexnet", 20.0, 32),
                     *(["--members", str(members)] if members > 1 else []),
                     "--decode-threads", "1", "--max-batch", "32",
                     "--min-rebalance-interval-s", "10")
        names.append(name)
    deadline = time.monotonic() + 300
    while members_owning(fleet, names) < nodes:
        fleet.check_alive(*names)
        if time.monotonic() > deadline:
            raise BenchError(f"{nodes} members did not all own partitions in 300 s")
        time.sleep(1)
    return names


def measure(src: str, args: argparse.Namespace, workdir: Path) -> Run:
    """One run of tree `src` on a broker of its own: the idle pool, then one job."""
    jmx = free_port()
    os.environ["INFERSTREAM_KAFKA_JVM_OPTS"] = " ".join([
        *DEFAULT_JVM_OPTS, f"-Dcom.sun.management.jmxremote.port={jmx}",
        f"-Dcom.sun.management.jmxremote.rmi.port={jmx}",
        "-Dcom.sun.management.jmxremote.host=127.0.0.1",
        "-Dcom.sun.management.jmxremote.authenticate=false",
        "-Dcom.sun.management.jmxremote.ssl=false"])
    os.environ.pop("PYTHONPATH", None)
    if src != "installed":
        os.environ["PYTHONPATH"] = str(Path(src).resolve())
    broker = start_broker(workdir / "kafka")
    run = Run(src)
    try:
        fleet = Fleet(broker.bootstrap, args.nodes, workdir, "br")
        fleet.create_topics()
        start_fleet(fleet, args.nodes, args.members_per_process)
        time.sleep(args.settle_s)
        pid = broker.pid() or 0
        cpu, counts, t0 = cpu_s(pid), request_counts(jmx), time.monotonic()
        time.sleep(args.idle_s)
        run.idle_cpu_s, run.idle_s = cpu_s(pid) - cpu, time.monotonic() - t0
        run.idle_requests = grown(request_counts(jmx), counts)
        if args.items:
            _job(run, fleet, broker.bootstrap, jmx, pid, args, workdir)
        fleet.stop_all()
    finally:
        broker.clean()
    return run


def _job(run: Run, fleet: Fleet, bootstrap: str, jmx: int, pid: int,
         args: argparse.Namespace, workdir: Path) -> None:
    listing = write_listing(workdir / "items.txt", args.items, "b")
    ends = log_ends(bootstrap, fleet.config.topic_prefix)
    cpu, counts = cpu_s(pid), request_counts(jmx)
    t0 = time.monotonic()
    job = fleet.client.submit(packs_model("alexnet"), [f"@{listing}"],
                              chunk_size=args.task_items)
    status = job.wait(timeout_s=args.job_timeout_s)
    run.job_s, run.job_cpu_s = time.monotonic() - t0, cpu_s(pid) - cpu
    if not status.finished or status.ok_items != args.items:
        raise BenchError(f"the job ended {status}")
    run.job_requests = grown(request_counts(jmx), counts)
    run.appended = grown(log_ends(bootstrap, fleet.config.topic_prefix), ends)
    run.tasks = -(-args.items // args.task_items)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", action="append", default=None,
                        help="the fleet's PYTHONPATH (repeatable; 'installed': none)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--members-per-process", type=int, default=25)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--items", type=int, default=120_000, help="0: no job")
    parser.add_argument("--task-items", type=int, default=64)
    parser.add_argument("--job-timeout-s", type=float, default=900.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[Run]:
    args = parse_args(argv)
    runs = []
    for _ in range(args.rounds):
        for src in args.src or ["installed"]:
            with tempfile.TemporaryDirectory(prefix="broker-requests-") as tmp:
                run = measure(src, args, Path(tmp))
            print("\n".join(run.lines()), flush=True)
            runs.append(run)
    return runs


if __name__ == "__main__":
    main()
