"""What benchmarks P5 and P7 share: a fleet of processes, their ownership log, committed results.

`Fleet` starts a controller and workers under one topic prefix, one log file per process.
`ownership_events` reads the workers' `assigned partitions=` / `revoked partitions=` lines
(with their log timestamps) so a benchmark can say when a partition changed hands.
`CommittedResults` reads the results topic with `isolation.level=read_committed` on a
background thread and stamps each TaskResult with the moment it became visible;
`TaskPlacements` reads the task topic the same way, for the partition each task went to.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Self

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))

from p1_stack import INFERSTREAM, BenchError, Broker

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.kafka.groups import describe_with
from inferstream.kafka.settings import PARTITION_EOF, consumer_config
from inferstream.kafka.topics import ensure_topics
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import Task, read_record

_OWNERSHIP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?"
                        r"(assigned|revoked) partitions=\[([\d, ]*)\]")


def source_version() -> str:
    """The commit the processes run, flagged when src/ has uncommitted changes."""
    repo = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=30, check=False).stdout.strip()

    dirty = git("status", "--porcelain", "--", "src")
    return git("rev-parse", "--short", "HEAD") + (" with uncommitted src/ changes" if dirty
                                                  else "")


def write_listing(path: Path, items: int, tag: str) -> Path:
    """An @LIST file of `items` names (sim models never open them)."""
    path.write_text("".join(f"{tag}-{i:07d}\n" for i in range(items)))
    return path


def start_broker(directory: Path, tries: int = 3) -> Broker:
    """A one-broker cluster; retried because `cluster start` sometimes reports a broker that
    is starting as "exited while starting" (its /proc cmdline is read before the exec shows)."""
    broker = Broker(directory)
    for attempt in range(1, tries + 1):
        broker.clean()  # a cluster left over by an interrupted run, or a failed start
        try:
            broker.start()
            return broker
        except BenchError:
            if attempt == tries:
                raise
            time.sleep(1)
    return broker


class Fleet:
    """inferstream processes under one topic prefix; `stop_all()` ends every one of them."""

    def __init__(self, bootstrap: str, partitions: int, logdir: Path, tag: str) -> None:
        self.config = Config(bootstrap_servers=bootstrap, partitions=partitions,
                             task_partitions=partitions,
                             topic_prefix=f"{tag}-{uuid.uuid4().hex[:6]}.")
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.client = Client(self.config)

    def create_topics(self) -> None:
        report = ensure_topics(self.config)
        if not report.ok:
            raise BenchError(f"topics mismatch: {report.mismatched}")

    def _env(self) -> dict[str, str]:
        # restart off: the faults and the CPU and memory readings are the role's own
        # process's, not a supervisor's (p7_abort turns it on for the controller it aborts)
        return {**os.environ, "PYTHONUNBUFFERED": "1", "INFERSTREAM_RESTART": "off",
                "INFERSTREAM_BOOTSTRAP_SERVERS": self.config.bootstrap_servers,
                "INFERSTREAM_TOPIC_PREFIX": self.config.topic_prefix,
                "INFERSTREAM_PARTITIONS": str(self.config.partitions),
                "INFERSTREAM_TASK_PARTITIONS": str(self.config.task_partitions)}

    def log_path(self, name: str) -> Path:
        return self.logdir / f"{self.config.topic_prefix}{name}.log"

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.log_path(name), "wb") as log:  # the child keeps its own copy
            proc = subprocess.Popen([*INFERSTREAM, *args], stdout=log, stderr=subprocess.STDOUT,
                                    env=self._env())
        self.procs[name] = proc
        return proc

    def worker(self, name: str, model: str, *args: str) -> subprocess.Popen[bytes]:
        return self.start(name, "worker", "--model", model, "--worker-id", name,
                          "--decode-threads", "2", *args)

    def check_alive(self, *names: str) -> None:
        for name in names:
            code = self.procs[name].poll()
            if code is not None:
                tail = self.log_path(name).read_text(errors="replace")[-2000:]
                raise BenchError(f"{name} exited with {code}:\n{tail}")

    def wait_for_members(self, members: int, timeout_s: float, *alive: str) -> None:
        """Block until the pool's group has `members` members, each owning a partition
        (BenchError if one of the processes `alive` exits meanwhile, or at `timeout_s`)."""
        describe = describe_with(partial(self.client.clients.admin,
                                         self.config.confluent_config()))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive(*alive)
            try:
                owned = describe(self.config.worker_group(self.config.pool))
            except Exception:  # the group not formed yet
                owned = {}
            if len(owned) == members and all(owned.values()):
                return
            time.sleep(0.5)
        raise BenchError(f"the {members} members never shared the partitions")

    def stop_all(self) -> None:
        """SIGCONT (a paused one cannot die otherwise), SIGKILL, reap."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait(timeout=60)


# -- who owns which task partition, from the worker logs -----------------------------------
@dataclass(frozen=True)
class Ownership:
    """One `assigned`/`revoked partitions=` log line of a worker, at its log time (epoch s)."""

    t: float
    member: str
    kind: str
    partitions: frozenset[int]


def _log_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time, as logged


def ownership_events(fleet: Fleet, members: list[str]) -> list[Ownership]:
    """Every assignment change the workers `members` logged, oldest first."""
    events = []
    for member in members:
        path = fleet.log_path(member)
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            match = _OWNERSHIP.match(line)
            if match:
                parts = frozenset(int(p) for p in match[3].split(",") if p.strip())
                events.append(Ownership(_log_time(match[1]), member, match[2], parts))
    return sorted(events, key=lambda e: e.t)


def owners_at(events: list[Ownership], t: float) -> dict[str, frozenset[int]]:
    """What each member owned at time `t` (an `assigned` line lists all it owns)."""
    owned: dict[str, frozenset[int]] = {}
    for event in events:
        if event.t > t:
            break
        if event.kind == "assigned":
            owned[event.member] = event.partitions
        else:
            owned[event.member] = owned.get(event.member, frozenset()) - event.partitions
    return owned


def first_full_ownership(events: list[Ownership], members: set[str], partitions: int,
                         after: float) -> float | None:
    """The first time after `after` at which `members` together own every partition."""
    for event in events:
        if event.t <= after or event.member not in members:
            continue
        owned = owners_at(events, event.t)
        covered = set().union(*(owned.get(m, frozenset()) for m in members))
        if len(covered) == partitions:
            return event.t
    return None


def wait_for_group(fleet: Fleet, members: list[str], timeout_s: float = 180,
                   quiet_s: float = 2.0) -> None:
    """Block until `members` share every partition, each owning some, unchanged for `quiet_s`."""
    deadline = time.monotonic() + timeout_s
    n = fleet.config.task_partitions_for()
    while time.monotonic() < deadline:
        fleet.check_alive(*members)
        events = ownership_events(fleet, members)
        owned = owners_at(events, time.time())
        shares = [owned.get(m, frozenset()) for m in members]
        settled = bool(events) and time.time() - events[-1].t >= quiet_s
        if settled and all(shares) and sum(map(len, shares)) == n == len(set().union(*shares)):
            return
        time.sleep(0.2)
    raise BenchError(f"workers {members} never settled: {owners_at(events, time.time())}")


# -- committed results -----------------------------------------------------------------------
@dataclass(frozen=True)
class SeenResult:
    """A committed TaskResult and when the reader saw it (epoch seconds)."""

    seen_at: float
    job_id: str
    task_id: int
    attempt: int
    worker: str
    finished_at: float
    names: tuple[str, ...]


class _CommittedReader:
    """Reads every partition of `topic`, read_committed, from the beginning, on a thread;
    `_keep` takes each record's value and partition."""

    def __init__(self, config: Config, topic: str) -> None:
        self.config = config
        self.topic = topic
        self.codec = Codec.for_config(config)
        self._end: dict[int, int] = {}
        self.failure: Exception | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"read-{topic}", daemon=True)

    def _consumer(self) -> Consumer:
        return Consumer(consumer_config(self.config, f"bench-reader-{uuid.uuid4().hex[:6]}", **{
            "enable.partition.eof": True, "fetch.wait.max.ms": 50}))

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _partitions(self, consumer: Consumer) -> list[int]:
        """The topic's partitions, once metadata of the freshly created topic has them."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            meta = consumer.list_topics(self.topic, timeout=30).topics.get(self.topic)
            if meta is not None and meta.error is None and meta.partitions:
                return sorted(meta.partitions)
            time.sleep(0.2)
        raise BenchError(f"topic {self.topic} has no partitions")

    def _run(self) -> None:
        try:
            self._read()
        except Exception as exc:
            self.failure = exc
            raise

    def _read(self) -> None:
        consumer = self._consumer()
        partitions = self._partitions(consumer)
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
        try:
            while not self._stop.is_set():
                message = consumer.poll(0.05)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == PARTITION_EOF:
                        with self._lock:
                            self._end[message.partition() or 0] = message.offset() or 0
                    continue
                self._keep(message.value() or b"", message.partition() or 0)
        finally:
            consumer.close()

    def _keep(self, value: bytes, partition: int) -> None:
        raise NotImplementedError

    def read_to_end(self, timeout_s: float = 120) -> None:
        """Wait until the reader has passed every committed record written so far."""
        probe = self._consumer()
        try:
            high = {p: probe.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)[1]
                    for p in self._partitions(probe)}
        finally:
            probe.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.failure is not None:
                raise BenchError(f"reader of {self.topic} failed: {self.failure!r}")
            with self._lock:
                if all(self._end.get(p, -1) >= h for p, h in high.items() if h > 0):
                    return
            time.sleep(0.1)
        raise BenchError(f"reader of {self.topic} did not reach {high} in {timeout_s}s: "
                         f"{self._end}")


class CommittedResults(_CommittedReader):
    """The TaskResults of `<prefix>results`, each stamped with when it became visible."""

    def __init__(self, config: Config) -> None:
        super().__init__(config, config.topic("results"))
        self.seen: list[SeenResult] = []

    def _keep(self, value: bytes, partition: int) -> None:
        seen_at = time.time()
        try:
            result = self.codec.decode(value, expected="TaskResult")
        except SchemaError:
            return
        finished = result["finished_at"]
        record = SeenResult(
            seen_at, result["job_id"], result["task_id"], result["attempt"], result["worker"],
            finished.timestamp() if isinstance(finished, datetime) else finished / 1000,
            tuple(item["name"] for item in result["items"]))
        with self._lock:
            self.seen.append(record)

    def snapshot(self) -> list[SeenResult]:
        with self._lock:
            return list(self.seen)

    def done_items(self, job_id: str) -> int:
        """Items of `job_id` with a committed result (each task counted once)."""
        tasks = {r.task_id: len(r.names) for r in self.snapshot() if r.job_id == job_id}
        return sum(tasks.values())



class TaskPlacements(_CommittedReader):
    """The partition of `pool`'s task topic each (job, task, attempt) was issued to: a paced
    task goes wherever its worker has room, not where `task_partition` would put it."""

    def __init__(self, config: Config, pool: str | None = None) -> None:
        super().__init__(config, config.task_topic(pool))
        self._placed: dict[tuple[str, int, int], int] = {}

    def _keep(self, value: bytes, partition: int) -> None:
        try:
            task = read_record(self.codec, value, Task)
        except SchemaError:
            return
        with self._lock:
            self._placed[(task["job_id"], task["task_id"], task["attempt"])] = partition

    def partition_of(self, result: SeenResult) -> int | None:
        """Where `result`'s task attempt was issued; None if not read yet."""
        with self._lock:
            return self._placed.get((result.job_id, result.task_id, result.attempt))


def audit(results: list[SeenResult], job_id: str, expected: list[str]) -> dict[str, int]:
    """Duplicate (job, task, attempt) records and lost or extra items of one job."""
    mine = [r for r in results if r.job_id == job_id]
    keys = Counter((r.task_id, r.attempt) for r in mine)
    got = {name for r in mine for name in r.names}
    return {
        "records": len(mine),
        "duplicate_records": sum(c - 1 for c in keys.values()),
        "duplicated_tasks": sum(1 for c in keys.values() if c > 1),
        "duplicate_items": sum(len(r.names) for r in mine) - len(got),
        "lost_items": len(set(expected) - got),
        "unknown_items": len(got - set(expected)),
    }
