"""What the benchmarks share: a fleet of processes under one topic prefix, and its ownership log.

`Fleet` starts a controller and workers under one topic prefix, one log file per process.
`ownership_events` reads the workers' `assigned partitions=` / `revoked partitions=` lines
(with their log timestamps) so a benchmark can say when a partition changed hands
(committed.py reads back what they committed).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path

from confluent_kafka import KafkaException

sys.path.insert(0, str(Path(__file__).resolve().parent))

from p1_stack import INFERSTREAM, BenchError, Broker, free_port

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.kafka.groups import describe_with
from inferstream.kafka.topics import admin_client, ensure_topics

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

    def delete_topics(self, timeout_s: float = 60) -> None:
        """Delete this fleet's topics (processes stopped first): the broker carries no
        earlier run's partitions and producer state into the next."""
        admin = admin_client(self.config)
        names = [t for t in admin.list_topics(timeout=timeout_s).topics
                 if t.startswith(self.config.topic_prefix)]
        for name, future in admin.delete_topics(names, operation_timeout=timeout_s).items():
            try:
                future.result(timeout=timeout_s)
            except KafkaException as exc:
                raise BenchError(f"cannot delete topic {name}: {exc.args[0]}") from exc

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

    def sysinfo(self) -> subprocess.Popen[bytes]:
        """The sysinfo app on a free loopback port, with the workers' 6 s session timeout."""
        return self.start("sysinfo", "sysinfo", "--port", str(free_port()), "--advertised-host",
                          "127.0.0.1", "--session-timeout-s", "6")

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


