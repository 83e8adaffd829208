"""Issue 29.3 on the real broker: autoscaling on the controller's desired-workers gauge.

A small scaler does KEDA's part: every second it reads `inferstream_pool_desired_workers` from
the controller's /metrics (the text format, as KEDA's Prometheus scaler reads a query), starts
`inferstream worker` processes up to it and, once the gauge has stayed below the workers for a
cooldown, SIGTERMs the newest, between 0 and `MAX_WORKERS`. A burst of jobs submitted to a pool
of no worker takes it from 0 to several workers and back to 0; a job submitted when the pool
is at 0 again waits and then completes. Every item of every job has exactly one result.
"""

from __future__ import annotations

import math
import signal
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inferstream.client.client import Client, Job
from inferstream.config import Config
from tests.integration.conftest import Processes
from tests.integration.test_sysinfo import free_port

pytestmark = pytest.mark.integration

MODEL = "sim:ms=25"
#: The workers the scaler runs at most (KEDA's maxReplicaCount); the pool has 4 partitions.
MAX_WORKERS = 3
#: How long the gauge stays below the workers before the scaler stops one (KEDA's cooldown
#: and the HPA's scale-down window, shortened for a test).
COOLDOWN_S = 3.0
#: Seconds within which the controller's desired workers would clear the backlog: the burst
#: below is about 30 s of one worker's work.
TARGET_S = 10


def desired_workers(port: int) -> float | None:
    """The sum of the controller's `inferstream_pool_desired_workers` of the pool (what KEDA's
    query reads); None while /metrics does not answer or has no such series."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    values = [s.value for family in text_string_to_metric_families(text)
              if family.name == "inferstream_pool_desired_workers"
              for s in family.samples if s.labels.get("pool") == "default"]
    return sum(values) if values else None


@dataclass
class Scaler:
    """Matches the pool's workers to the controller's gauge, once a second, in a thread."""

    procs: Processes
    port: int
    started_at: float = field(default_factory=time.monotonic)
    running: list[tuple[str, Popen[bytes]]] = field(default_factory=list)
    stopped: list[tuple[str, Popen[bytes]]] = field(default_factory=list)
    #: (seconds since start, what happened): each change of the gauge, each start and stop
    timeline: list[tuple[float, str]] = field(default_factory=list)
    peak: int = 0
    #: the gauge as last read (None before the controller answered)
    gauge: float | None = None
    _below_since: float | None = None
    _joined: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="scaler", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.step()

    def note(self, what: str) -> None:
        self.timeline.append((time.monotonic() - self.started_at, what))

    def step(self) -> None:
        desired = desired_workers(self.port)
        if desired is None:
            return
        if desired != self.gauge:
            self.note(f"gauge {desired:g} (workers {len(self.running)})")
            self.gauge = desired
        target = max(0, min(MAX_WORKERS, math.ceil(desired)))
        now = time.monotonic()
        if target >= len(self.running):
            self._below_since = None
        elif self._below_since is None:
            self._below_since = now
        while target > len(self.running):
            name = f"w{len(self.running) + len(self.stopped) + 1}"
            self.running.append((name, self.procs.worker(MODEL, name=name)))
            self.note(f"start {name}")
        self.peak = max(self.peak, len(self.running))
        for name, _ in self.running:
            if name not in self._joined and "assigned partitions=" in self.procs.log(name):
                self._joined.add(name)
                self.note(f"{name} owns partitions")
        if self._below_since is not None and now - self._below_since >= COOLDOWN_S:
            while len(self.running) > target:  # newest first
                name, proc = self.running.pop()
                proc.send_signal(signal.SIGTERM)
                self.stopped.append((name, proc))
                self.note(f"SIGTERM {name}")
            self._below_since = None

    def wait_for(self, what: str, check: object, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():  # type: ignore[operator]
                self.note(what)
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}: {self.report()}")

    def report(self) -> str:
        return "\n".join(f"{t:6.1f} s  {what}" for t, what in self.timeline)


def submit(config: Config, tmp_path: Path, name: str, items: int) -> tuple[Job, list[str]]:
    names = [f"{name}-{i:04d}" for i in range(items)]
    listing = tmp_path / f"{name}.txt"
    listing.write_text("\n".join(names) + "\n")
    return Client(config).submit(MODEL, [f"@{listing}"], chunk_size=20), names


def answered_once(config: Config, job: Job, names: list[str]) -> None:
    """The job completed with every item answered once, ok."""
    status = job.wait(timeout_s=120)
    assert status.ok_items == len(names) and status.error_items == 0
    lines = list(Client(config).job(job.job_id).results())
    counts = Counter(str(line["item"]) for line in lines)
    assert counts == Counter(names), "an item lost or answered twice"
    assert all(line["status"] == "ok" for line in lines)


@pytest.mark.timeout(300)
def test_the_pool_follows_the_desired_workers_from_zero_to_several_and_back(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    port = free_port()
    procs.controller("--metrics-port", str(port), "--backlog-target-s", str(TARGET_S))
    scaler = Scaler(procs, port)
    try:
        scaler.wait_for("the controller's gauge", lambda: scaler.gauge is not None, 60)
        assert scaler.gauge == 0 and not scaler.running  # nothing waits: no worker

        burst = [submit(config, tmp_path, f"burst{n}", 400) for n in range(3)]
        scaler.note("burst of 3 jobs of 400 items submitted")
        for job, names in burst:
            answered_once(config, job, names)
        scaler.note("burst completed")
        scaler.wait_for("the pool back at 0", lambda: not scaler.running, 90)
        assert scaler.peak >= 2, scaler.report()

        late, names = submit(config, tmp_path, "late", 100)  # no worker runs now
        scaler.note("one job of 100 items submitted to a pool of 0")
        submitted = len(scaler.timeline)
        answered_once(config, late, names)
        scaler.note("late job completed")
        assert any(what.startswith("start ") for _, what in scaler.timeline[submitted:])
        scaler.wait_for("the pool back at 0", lambda: not scaler.running, 90)
        assert scaler.gauge == 0
    finally:
        scaler.close()
        print(scaler.report())
    for name, proc in scaler.stopped:
        assert proc.wait(timeout=60) == 0, f"{name} did not drain cleanly:\n{procs.log(name)}"
