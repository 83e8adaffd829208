"""The faults of a chaos scenario: a seeded schedule, and the hands that inject them.

`FaultSchedule.from_seed` decides which faults happen, in which order, at which fraction of
the job's done items; `FaultInjector` injects them into a `ChaosCluster` (three brokers from
`ops/kafka/cluster`) and a `WorkerFleet` (worker processes), logging each step on a
`Timeline`. Faults that last (a pause, a broker outage) end through follow-ups that the
scenario's loop runs when they are due, so the job keeps running meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.conftest import CLUSTER, Processes

KILL_WORKER, PAUSE_WORKER, KILL_BROKER = "kill-worker", "pause-worker", "kill-broker"
ADD_WORKERS, REMOVE_WORKER = "add-workers", "remove-worker"
KILL_CONTROLLER, PAUSE_CONTROLLER = "kill-controller", "pause-controller"
SLOW_WORKER = "slow-worker"
#: How much slower the worker of a SLOW_WORKER fault is.
SLOW_FACTOR = 8


class ClusterUnavailableError(Exception):
    """The 3-broker cluster could not start (no Java, no jars, no ports...)."""


# -- the timeline ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TimelineEntry:
    t_s: float
    event: str
    target: str
    done: int
    total: int
    note: str = ""

    def render(self) -> str:
        pct = 100.0 * self.done / self.total if self.total else 0.0
        note = f"  {self.note}" if self.note else ""
        return (f"  t={self.t_s:7.1f}s  {self.event:<15} {self.target:<10} "
                f"done={self.done}/{self.total} ({pct:4.1f}%){note}")


@dataclass
class Timeline:
    """What happened when, printed as it happens; `progress` gives (done, total) now."""

    progress: Callable[[], tuple[int, int]]
    started: float = field(default_factory=time.monotonic)
    entries: list[TimelineEntry] = field(default_factory=list)

    def add(self, event: str, target: str = "", note: str = "") -> None:
        done, total = self.progress()
        entry = TimelineEntry(time.monotonic() - self.started, event, target, done, total, note)
        self.entries.append(entry)
        print(entry.render(), flush=True)

    def note(self, text: str) -> None:
        """Print a line in the timeline's format without keeping it (periodic progress)."""
        done, total = self.progress()
        print(TimelineEntry(time.monotonic() - self.started, text, "", done, total).render(),
              flush=True)

    def render(self) -> str:
        return "\n".join(e.render() for e in self.entries)


# -- the cluster ----------------------------------------------------------------------------
class ChaosCluster:
    """A 3-broker cluster in `directory`, driven through `ops/kafka/cluster`."""

    def __init__(self, directory: Path, brokers: int = 3) -> None:
        self.directory = directory
        self.brokers = brokers
        self.bootstrap = ""
        self.restarting: dict[int, subprocess.Popen[str]] = {}

    def _cmd(self, *args: str) -> list[str]:
        return [sys.executable, str(CLUSTER), *args, "--dir", str(self.directory)]

    def start(self) -> str:
        proc = subprocess.run(
            self._cmd("start", "--brokers", str(self.brokers), "--port", "auto"),
            capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise ClusterUnavailableError(f"cannot start Kafka: {proc.stderr.strip()[-2000:]}")
        self.bootstrap = proc.stdout.strip().splitlines()[-1]
        return self.bootstrap

    def kill(self, broker: int) -> None:
        subprocess.run(self._cmd("kill", str(broker)), capture_output=True, text=True,
                       timeout=120, check=True)

    def begin_restart(self, broker: int) -> None:
        """Start the broker again in the background; `finished_restarts` reports it."""
        self.restarting[broker] = subprocess.Popen(
            self._cmd("restart", str(broker)), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)

    def finished_restarts(self) -> list[tuple[int, int, str]]:
        """(broker, exit code, last output line) of the restarts that ended since last asked."""
        done = []
        for broker, proc in list(self.restarting.items()):
            if proc.poll() is not None:
                out = (proc.communicate()[0] or "").strip().splitlines()
                done.append((broker, proc.returncode, out[-2] if len(out) > 1 else ""))
                del self.restarting[broker]
        return done

    def keep_logs(self, into: Path) -> None:
        """Copy the brokers' server logs into `into` (before `clean` deletes them)."""
        for broker in range(1, self.brokers + 1):
            log = self.directory / f"node-{broker}" / "server.log"
            with contextlib.suppress(OSError):
                shutil.copy(log, into / f"broker-{broker}.log")

    def clean(self) -> None:
        for proc in self.restarting.values():
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        self.restarting.clear()
        subprocess.run(self._cmd("clean"), capture_output=True, timeout=180, check=False)


# -- the workers ----------------------------------------------------------------------------
class WorkerFleet:
    """The scenario's worker processes by name: w1, w2, ... in start order."""

    def __init__(self, procs: Processes, model: str, worker_args: list[str]) -> None:
        self.procs = procs
        self.model = model
        self.worker_args = worker_args
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.paused: set[str] = set()
        self.leaving: dict[str, float] = {}  # name -> monotonic time of its SIGTERM
        self.exit_codes: dict[str, int] = {}
        self._joined: set[str] = set()

    def add(self, model: str | None = None) -> str:
        """Start one more worker (of `model`, default the scenario's)."""
        name = f"w{len(self.workers) + 1}"
        self.workers[name] = self.procs.worker(model or self.model, *self.worker_args,
                                               name=name)
        return name

    def live(self) -> list[str]:
        """Running workers that are neither paused nor leaving, in start order."""
        return [n for n, p in self.workers.items()
                if p.poll() is None and n not in self.paused and n not in self.leaving]

    def joined(self, name: str) -> bool:
        """Whether the worker has logged a partition assignment (it is in the group)."""
        if name not in self._joined and "assigned partitions=" in self.procs.log(name):
            self._joined.add(name)
        return name in self._joined

    def signal(self, name: str, sig: signal.Signals) -> None:
        os.kill(self.workers[name].pid, sig)

    def kill(self, name: str) -> int:
        self.signal(name, signal.SIGKILL)
        code = self.workers[name].wait(timeout=30)
        self.exit_codes[name] = code
        return code

    def terminate(self, name: str) -> None:
        self.signal(name, signal.SIGTERM)
        self.leaving[name] = time.monotonic()

    def finished_leavers(self) -> list[tuple[str, int, float]]:
        """(name, exit code, seconds to exit) of the SIGTERMed workers that exited."""
        done = []
        for name, since in list(self.leaving.items()):
            code = self.workers[name].poll()
            if code is not None:
                self.exit_codes[name] = code
                done.append((name, code, time.monotonic() - since))
                del self.leaving[name]
        return done

    def unexpected_exits(self) -> dict[str, int]:
        """Workers that exited without the scenario asking them to."""
        return {n: p.returncode for n, p in self.workers.items()
                if p.poll() is not None and n not in self.exit_codes and n not in self.leaving}

    def resume_all(self) -> None:
        for name in list(self.paused):
            with contextlib.suppress(ProcessLookupError):
                self.signal(name, signal.SIGCONT)
        self.paused.clear()


class ControllerFleet:
    """The scenario's controller replicas by name: c1, c2, ... in start order."""

    def __init__(self, procs: Processes, args: list[str]) -> None:
        self.procs = procs
        self.args = args
        self.replicas: dict[str, subprocess.Popen[bytes]] = {}
        self.paused: set[str] = set()
        self.killed: set[str] = set()

    def add(self) -> str:
        name = f"c{len(self.replicas) + 1}"
        self.replicas[name] = self.procs.start(name, "controller", *self.args)
        return name

    def live(self) -> list[str]:
        return [n for n, p in self.replicas.items()
                if p.poll() is None and n not in self.paused and n not in self.killed]

    def owner(self, partition: int) -> str | None:
        """The live replica whose latest assignment has job partition `partition`."""
        for name in self.live():
            lines = [line for line in self.procs.log(name).splitlines()
                     if "owning job partitions=" in line]
            if lines:
                listed = lines[-1].split("owning job partitions=")[1].split("]")[0].strip("[ ")
                if str(partition) in [p.strip() for p in listed.split(",")]:
                    return name
        return None

    def signal(self, name: str, sig: signal.Signals) -> None:
        os.kill(self.replicas[name].pid, sig)

    def kill(self, name: str) -> int:
        self.signal(name, signal.SIGKILL)
        self.killed.add(name)
        return self.replicas[name].wait(timeout=30)

    def unexpected_exits(self) -> dict[str, int]:
        return {n: p.returncode for n, p in self.replicas.items()
                if p.poll() is not None and n not in self.killed}

    def resume_all(self) -> None:
        for name in list(self.paused):
            with contextlib.suppress(ProcessLookupError):
                self.signal(name, signal.SIGCONT)
        self.paused.clear()


# -- the schedule ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ScheduledFault:
    at_fraction: float
    kind: str


@dataclass(frozen=True)
class FaultSchedule:
    faults: tuple[ScheduledFault, ...]

    @classmethod
    def from_seed(cls, rng: random.Random, worker_kills: int = 2, first: float = 0.06,
                  last: float = 0.6, controllers: bool = True) -> FaultSchedule:
        """Every kind of fault once (worker kills `worker_kills` times), in a seeded order,
        spread evenly over [first, last] of the job with a little seeded jitter; with
        `controllers`, also kill -9 and SIGSTOP of the replica that owns the job, and a
        worker `SLOW_FACTOR` times slower than the others."""
        kinds = [KILL_WORKER] * worker_kills + [PAUSE_WORKER, KILL_BROKER, ADD_WORKERS,
                                                REMOVE_WORKER]
        if controllers:
            kinds += [KILL_CONTROLLER, PAUSE_CONTROLLER, SLOW_WORKER]
        rng.shuffle(kinds)
        step = (last - first) / max(1, len(kinds) - 1)
        fractions = [first + i * step + rng.uniform(-step / 4, step / 4) for i in range(len(kinds))]
        return cls(tuple(ScheduledFault(round(f, 3), k) for f, k in zip(fractions, kinds,
                                                                        strict=True)))

    def render(self) -> str:
        return ", ".join(f"{f.kind}@{100 * f.at_fraction:.0f}%" for f in self.faults)


@dataclass(order=True)
class FollowUp:
    due: float
    what: str = field(compare=False)
    action: Callable[[], None] = field(compare=False)


class FaultInjector:
    """Injects faults by kind; lasting faults leave follow-ups to run when due."""

    def __init__(self, rng: random.Random, cluster: ChaosCluster, fleet: WorkerFleet,
                 timeline: Timeline, session_timeout_s: float,
                 controllers: ControllerFleet | None = None, job_partition: int = 0,
                 controller_session_s: float = 6.0) -> None:
        self.rng = rng
        self.cluster = cluster
        self.fleet = fleet
        self.controllers = controllers
        self.job_partition = job_partition
        self.controller_session_s = controller_session_s
        self.timeline = timeline
        self.session_timeout_s = session_timeout_s
        self.follow_ups: list[FollowUp] = []
        self.last_fault = 0.0

    def settled(self, min_gap_s: float = 3.0, max_wait_s: float = 60.0) -> bool:
        """Ready for the next fault: a few seconds since the last one, and every live worker
        in the group (so victims are real members), or `max_wait_s` gone by regardless."""
        since = time.monotonic() - self.last_fault
        if since < min_gap_s:
            return False
        return since >= max_wait_s or all(self.fleet.joined(n) for n in self.fleet.live())

    def inject(self, kind: str) -> None:
        self.last_fault = time.monotonic()
        {KILL_WORKER: self.kill_worker, PAUSE_WORKER: self.pause_worker,
         KILL_BROKER: self.kill_broker, ADD_WORKERS: self.add_workers,
         REMOVE_WORKER: self.remove_worker, KILL_CONTROLLER: self.kill_controller,
         PAUSE_CONTROLLER: self.pause_controller, SLOW_WORKER: self.slow_worker}[kind]()

    def _pick(self) -> str:
        live = self.fleet.live()
        if len(live) < 2:
            raise RuntimeError(f"fewer than two live workers to pick a victim from: {live}")
        return self.rng.choice(live)

    def kill_worker(self) -> None:
        victim = self._pick()
        code = self.fleet.kill(victim)
        self.timeline.add("kill -9 worker", victim, f"exit={code}")
        replacement = self.fleet.add()
        self.timeline.add("start worker", replacement, f"replaces {victim}")

    def pause_worker(self) -> None:
        victim = self._pick()
        pause_s = round(self.session_timeout_s * 1.5 + self.rng.uniform(0, 2), 1)
        self.fleet.signal(victim, signal.SIGSTOP)
        self.fleet.paused.add(victim)
        self.timeline.add("SIGSTOP worker", victim, f"for {pause_s}s "
                          f"(session timeout {self.session_timeout_s}s)")

        def resume() -> None:
            self.fleet.signal(victim, signal.SIGCONT)
            self.fleet.paused.discard(victim)
            self.timeline.add("SIGCONT worker", victim, f"after {pause_s}s")

        self._later(pause_s, f"SIGCONT {victim}", resume)

    def kill_broker(self) -> None:
        broker = self.rng.randint(1, self.cluster.brokers)
        down_s = round(self.rng.uniform(2, 6), 1)
        self.cluster.kill(broker)
        self.timeline.add("kill -9 broker", f"broker-{broker}", f"down for {down_s}s")

        def restart() -> None:
            self.cluster.begin_restart(broker)
            self.timeline.add("restart broker", f"broker-{broker}", "started")

        self._later(down_s, f"restart broker-{broker}", restart)

    def add_workers(self) -> None:
        for _ in range(2):
            self.timeline.add("start worker", self.fleet.add(), "added")

    def _owning_controller(self) -> str:
        assert self.controllers is not None
        owner = self.controllers.owner(self.job_partition)
        live = self.controllers.live()
        if owner is None and not live:
            raise RuntimeError("no live controller replica to pick a victim from")
        return owner or self.rng.choice(live)

    def kill_controller(self) -> None:
        """kill -9 the replica that owns the job's partition; start a replacement."""
        assert self.controllers is not None
        victim = self._owning_controller()
        code = self.controllers.kill(victim)
        self.timeline.add("kill -9 controller", victim,
                          f"exit={code}, owned job partition {self.job_partition}")
        self.timeline.add("start controller", self.controllers.add(), f"replaces {victim}")

    def pause_controller(self) -> None:
        """SIGSTOP the replica that owns the job past its session timeout, then SIGCONT."""
        assert self.controllers is not None
        victim = self._owning_controller()
        pause_s = round(self.controller_session_s * 1.5 + self.rng.uniform(0, 2), 1)
        self.controllers.signal(victim, signal.SIGSTOP)
        self.controllers.paused.add(victim)
        self.timeline.add("SIGSTOP controller", victim, f"for {pause_s}s "
                          f"(session timeout {self.controller_session_s}s)")
        controllers = self.controllers

        def resume() -> None:
            controllers.signal(victim, signal.SIGCONT)
            controllers.paused.discard(victim)
            self.timeline.add("SIGCONT controller", victim, f"after {pause_s}s")

        self._later(pause_s, f"SIGCONT {victim}", resume)

    def slow_worker(self) -> None:
        """A worker `SLOW_FACTOR` times slower than the others joins and stays: its tasks
        must move elsewhere (migration)."""
        model = f"{self.fleet.model},slow_after=0,slow_factor={SLOW_FACTOR}"
        self.timeline.add("start worker", self.fleet.add(model), f"{SLOW_FACTOR}x slower")

    def remove_worker(self) -> None:
        victim = self._pick()
        self.fleet.terminate(victim)
        self.timeline.add("SIGTERM worker", victim, "removed")

    def _later(self, delay_s: float, what: str, action: Callable[[], None]) -> None:
        self.follow_ups.append(FollowUp(time.monotonic() + delay_s, what, action))
        self.follow_ups.sort()

    def run_due(self, everything: bool = False) -> None:
        """Run the follow-ups that are due (all of them with `everything`), and note the
        restarts and SIGTERM exits that have finished."""
        while self.follow_ups and (everything or self.follow_ups[0].due <= time.monotonic()):
            if everything:
                time.sleep(max(0.0, self.follow_ups[0].due - time.monotonic()))
            self.follow_ups.pop(0).action()
        for broker, code, line in self.cluster.finished_restarts():
            self.timeline.add("broker back" if code == 0 else "BROKER RESTART FAILED",
                              f"broker-{broker}", f"exit={code} {line}")
        for name, code, took_s in self.fleet.finished_leavers():
            self.timeline.add("worker exited", name, f"exit={code} after SIGTERM in {took_s:.1f}s")

    @property
    def pending(self) -> bool:
        return bool(self.follow_ups or self.cluster.restarting or self.fleet.leaving)
