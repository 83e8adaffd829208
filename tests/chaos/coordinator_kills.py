"""Coordinator kills: kill -9 and restart the broker that holds one of the controller's
coordinators, again and again, under a running controller; count how often it aborts.

    python -m tests.chaos.coordinator_kills [--kills 50] [--seed 1] [--dir DIR]
    make chaos-coordinators KILLS=50

Issue 26.1: a controller died of `rd_kafka_enq_once_del_source_return: Assertion
'eonce->refcnt > 0' failed` (SIGABRT) seconds after a broker kill (librdkafka#4605, see
`kafka.stuck_calls.CoordinatorRequests`). One controller (not supervised, `--log-level DEBUG
--kafka-config debug=eos,cgrp`) and three `sim:ms=5` workers run 30,000-item jobs one after
another on a 3-broker cluster with Kafka's own 9 s broker session timeout. Before each kill
every partition goes back to its preferred leader (the coordinators spread over the brokers
again), and the kill is for, in turn, the coordinator of the workers' group (which the
controller describes), of the controller group, and of most of the controller's
transactional ids: that broker is killed, left down 6-12 s, restarted, and the next kill
waits until the job moves again. The workers' group's broker is first restarted gracefully
and given back only that group's partition of __consumer_offsets: a broker that led more
would hold the controller in a commit while it is down, and the controller would not
describe the group then (the code before 8fb373e aborted after such a describe). A
controller that exits is an abort: its log of that kill (emptied at each kill it survives)
is kept as `abort-<kill>.log` and a new controller takes over. Every job must end COMPLETED
with one output line per item. About 25 s per kill.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.kafka.topics import ensure_topics
from tests.chaos.fleets import ChaosCluster, ClusterUnavailableError, WorkerFleet
from tests.chaos.progress import ProgressFollower
from tests.integration.conftest import INFERSTREAM, Processes, config_env

ITEMS = 30_000
MODEL = "sim:ms=5"
#: Kafka's own broker session timeout, not the local cluster's 5 s: a killed broker's
#: coordinators move as late as in production, where a client waits on them longest.
BROKER_SETTINGS = ("broker.session.timeout.ms=9000",
                   # the stress places the leaders itself (a broker leading one partition)
                   "auto.leader.rebalance.enable=false")
#: Whose coordinator each kill is for, in turn: the group the controller describes, its own
#: group, its transactional ids.
TARGETS = ("workers' group", "controllers' group", "controller transactions")
#: What the stress gives the controller's Kafka clients: the logs asked for in issue 26.1.
CONTROLLER_ARGS = ("controller", "--idle-exit", "900", "--log-level", "DEBUG",
                   "--kafka-config", "debug=eos,cgrp")


@dataclass
class KillReport:
    kills: list[str] = field(default_factory=list)
    aborts: list[str] = field(default_factory=list)
    jobs: int = 0
    problems: list[str] = field(default_factory=list)


def java_hash(text: str) -> int:
    """Java's String.hashCode, which Kafka uses to place a group or transactional id."""
    value = 0
    for char in text:
        value = (31 * value + ord(char)) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of __consumer_offsets or __transaction_state that coordinates `key`
    (Kafka's Utils.abs(key.hashCode) % partitions)."""
    value = java_hash(key)
    return (0 if value == -(1 << 31) else abs(value)) % partitions


def coordinators(admin: AdminClient, config: Config) -> dict[str, int]:
    """What the controller uses -> the broker that coordinates it now (-1 while a leader is
    elected), read from the internal topics' leaders (a metadata request: the describe this
    test is about is not safe here)."""
    keys = {"__consumer_offsets": [config.worker_group(), config.topic_prefix + "controllers"],
            "__transaction_state": transactional_ids(config)}
    topics = admin.list_topics(timeout=10).topics
    leaders: dict[str, int] = {}
    for topic, names in keys.items():
        partitions = topics[topic].partitions
        for name in names:
            leaders[name] = partitions[coordinator_partition(name, len(partitions))].leader
    return leaders


def leading(admin: AdminClient, broker: int) -> int:
    """How many partitions `broker` leads, of every topic."""
    topics = admin.list_topics(timeout=10).topics.values()
    return sum(p.leader == broker for t in topics for p in t.partitions.values())


def transactional_ids(config: Config) -> list[str]:
    return [f"{config.topic_prefix}controller.{i}" for i in range(config.partitions)]


def spread_leaders(admin: AdminClient) -> None:
    """Every partition back on its preferred leader, so that the coordinators are spread
    over the brokers again (each kill moves its broker's to the others)."""
    try:
        admin.elect_leaders(ElectionType.PREFERRED).result(30)
    except KafkaException as exc:  # a partition whose preferred replica is not in sync yet
        print(f"preferred leaders: {exc}", flush=True)


class ControllerRuns:
    """The controller processes in turn: a new one after each abort, each logging to a file
    opened for appending, so that the log can be emptied while the process writes it."""

    def __init__(self, procs: Processes, logs: Path) -> None:
        self.procs = procs
        self.logs = logs
        self.count = 0
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.count += 1
        with open(self.log, "ab") as log:
            proc = subprocess.Popen([*INFERSTREAM, *CONTROLLER_ARGS], stdout=log,
                                    stderr=subprocess.STDOUT, env=config_env(self.procs.cfg),
                                    cwd=self.logs)
        self.procs.started.append(proc)
        return proc

    @property
    def log(self) -> Path:
        return self.logs / f"controller-{self.count}.log"

    def forget_log(self) -> None:
        """Empty the log of a controller that survived (its debug output grows fast)."""
        with open(self.log, "r+b") as log:
            log.truncate(0)

    def aborted(self, kill: int, since: float) -> str | None:
        """When the controller has exited: keep its log and start the next one."""
        code = self.proc.poll()
        if code is None:
            return None
        kept = self.logs / f"abort-{kill:02d}.log"
        shutil.move(self.log, kept)
        self.proc = self._start()
        return (f"kill {kill}: the controller exited {code} {time.monotonic() - since:.1f}s "
                f"after the kill; log kept: {kept}")


class Stress:
    """The kills of one run, on a cluster whose topics exist and whose roles run."""

    def __init__(self, config: Config, cluster: ChaosCluster, runs: ControllerRuns,
                 listing: Path, seed: int) -> None:
        self.config = config
        self.cluster = cluster
        self.runs = runs
        self.listing = listing
        self.rng = random.Random(seed)
        self.report = KillReport()
        self.admin = AdminClient(config.confluent_config())
        self.follower = self.submit()
        self.kill = 0
        self.since = time.monotonic()

    def submit(self) -> ProgressFollower:
        job = Client(self.config).submit(MODEL, [f"@{self.listing}"], chunk_size=16)
        return ProgressFollower(self.config, job.job_id).start()

    def watch(self, submit: bool = True) -> None:
        """Note a controller that exited; check a job that finished and submit the next."""
        aborted = self.runs.aborted(self.kill, self.since)
        if aborted:
            print(f"ABORT {aborted}", flush=True)
            self.report.aborts.append(aborted)
        if self.follower.status is not None and self.follower.status.finished:
            self.check_job()
            if submit:
                self.follower = self.submit()

    def check_job(self) -> None:
        """The finished job ended COMPLETED with one output line per item."""
        follower = self.follower
        follower.stop()
        state = follower.status.state if follower.status else "unseen"
        items = [str(line["item"]) for line in Client(self.config).job(follower.job_id).results()]
        self.report.jobs += 1
        print(f"job {follower.job_id}: {state}, {len(items)} output lines", flush=True)
        if state != "COMPLETED" or len(items) != ITEMS or len(set(items)) != ITEMS:
            self.report.problems.append(f"job {follower.job_id} ended {state} with "
                                        f"{len(items)} lines, {len(set(items))} distinct")

    def until_moving(self, timeout_s: float) -> None:
        """Until the job's done count moves (or the next job's does)."""
        deadline = time.monotonic() + timeout_s
        job, start = self.follower.job_id, self.follower.done_items
        while time.monotonic() < deadline:
            self.watch()
            if self.follower.job_id != job or self.follower.done_items > start:
                return
            time.sleep(0.2)
        self.report.problems.append(f"kill {self.kill}: no progress for {timeout_s:.0f}s")

    def victim(self, target: str) -> int:
        """The broker that holds the coordinator of `target` now, after the leaders were
        spread again."""
        spread_leaders(self.admin)
        while True:
            leaders = coordinators(self.admin, self.config)
            if target == "controllers' group":
                broker = leaders[self.config.topic_prefix + "controllers"]
            else:
                held = Counter(leaders[tid] for tid in transactional_ids(self.config))
                broker = held.most_common(1)[0][0]
            if broker >= 0:  # else a leader is being elected
                return broker
            time.sleep(0.5)

    def isolate(self, timeout_s: float = 60) -> int:
        """The preferred leader of the workers' group's partition of __consumer_offsets,
        left leading that partition alone: a graceful restart moves each of its leaders
        away, then that partition alone is elected back to it."""
        partitions = self.admin.list_topics(timeout=10).topics["__consumer_offsets"].partitions
        wanted = TopicPartition("__consumer_offsets",
                                coordinator_partition(self.config.worker_group(), len(partitions)))
        broker = partitions[wanted.partition].replicas[0]
        self.restart(broker)
        deadline = time.monotonic() + timeout_s
        while coordinators(self.admin, self.config)[self.config.worker_group()] != broker:
            if time.monotonic() > deadline:
                print(f"broker-{broker} did not lead {wanted} again", flush=True)
                break
            with contextlib.suppress(KafkaException):  # not in sync yet
                self.admin.elect_leaders(ElectionType.PREFERRED, [wanted]).result(30)
            self.watch()
            time.sleep(0.5)
        return broker

    def restart(self, broker: int) -> None:
        """Start `broker` again (a graceful stop first if it runs) and wait until it is up."""
        self.cluster.begin_restart(broker)
        while self.cluster.restarting:
            self.watch()
            for _, code, _ in self.cluster.finished_restarts():
                if code != 0:
                    self.report.problems.append(f"broker-{broker} did not restart ({code})")
            time.sleep(0.2)

    def kill_once(self) -> None:
        """Kill the broker of the next coordinator, restart it, wait for progress."""
        self.kill += 1
        target = TARGETS[(self.kill - 1) % len(TARGETS)]
        broker = self.isolate() if target == "workers' group" else self.victim(target)
        held = [name for name, at in coordinators(self.admin, self.config).items()
                if at == broker]
        line = (f"kill {self.kill} ({target}): broker-{broker} ({', '.join(held)}; leading "
                f"{leading(self.admin, broker)} partitions)")
        down_s = self.rng.uniform(6, 12)
        self.runs.forget_log()
        self.since = time.monotonic()
        self.cluster.kill(broker)
        print(f"{line} down {down_s:.1f}s", flush=True)
        self.report.kills.append(line)
        while time.monotonic() - self.since < down_s:
            self.watch()
            time.sleep(0.2)
        self.restart(broker)
        self.until_moving(timeout_s=120)

    def finish(self, timeout_s: float = 600) -> None:
        """Until the last job is done, then check it."""
        deadline = time.monotonic() + timeout_s
        jobs = self.report.jobs
        while self.report.jobs == jobs and time.monotonic() < deadline:
            self.watch(submit=False)
            time.sleep(0.5)
        if self.report.jobs == jobs:
            self.report.problems.append(f"the last job did not finish in {timeout_s:.0f}s")
            self.follower.stop()


def stress(directory: Path, kills: int, seed: int) -> KillReport:
    """Start the cluster and the roles, run the kills, clean up (the logs stay)."""
    cluster = ChaosCluster(directory / "kafka", settings=BROKER_SETTINGS)
    procs: Processes | None = None
    try:
        config = Config(bootstrap_servers=cluster.start(), topic_prefix="ckill.",
                        partitions=4, task_partitions=4, replication_factor=3)
        assert ensure_topics(config).ok
        procs = Processes(config, directory / "logs")
        runs = ControllerRuns(procs, directory / "logs")
        fleet = WorkerFleet(procs, MODEL, ["--session-timeout-ms", "6000", "--idle-exit", "900"])
        for _ in range(3):
            fleet.add()
        listing = directory / "items.txt"
        listing.write_text("\n".join(f"item-{i:06d}" for i in range(ITEMS)) + "\n")
        run = Stress(config, cluster, runs, listing, seed)
        run.until_moving(timeout_s=180)
        for _ in range(kills):
            run.kill_once()
        run.finish()
        return run.report
    finally:
        if procs is not None:
            procs.stop_all()
        cluster.keep_logs(directory / "logs")
        cluster.clean()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.coordinator_kills",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="default: a new temporary dir")
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix=f"coordinator-kills-{args.seed}-"))
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    print(f"coordinator kills: {args.kills}, seed {args.seed}, dir {directory}", flush=True)
    started = time.monotonic()
    try:
        report = stress(directory, args.kills, args.seed)
    except ClusterUnavailableError as exc:
        print(f"coordinator kills: {exc}", file=sys.stderr)
        return 3
    aborts = len(report.aborts)
    print(f"coordinator kills: {len(report.kills)} kills, {aborts} controller aborts "
          f"({aborts / max(1, len(report.kills)):.0%}), {report.jobs} jobs checked, "
          f"{time.monotonic() - started:.0f}s", flush=True)
    for line in report.aborts:
        print(f"ABORT {line}", flush=True)
    for problem in report.problems:
        print(f"FAILED: {problem}", flush=True)
    print(f"logs: {directory / 'logs'}", flush=True)
    return 1 if report.aborts or report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
