"""The faults of a chaos scenario: a seeded schedule, and the hands that inject them.

`FaultSchedule.from_seed` decides which faults happen, in which order, at which fraction of
the job's done items; `FaultInjector` injects them into the processes of `fleets` (the brokers,
the workers, the controller replicas), logging each step on a `Timeline`. Faults that last (a
pause, a broker outage) end through follow-ups that the scenario's loop runs when they are due,
so the job keeps running meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.chaos.fleets import ChaosCluster, ControllerFleet, WorkerFleet

KILL_WORKER, PAUSE_WORKER, KILL_BROKER = "kill-worker", "pause-worker", "kill-broker"
ADD_WORKERS, REMOVE_WORKER = "add-workers", "remove-worker"
KILL_CONTROLLER, PAUSE_CONTROLLER = "kill-controller", "pause-controller"
SLOW_WORKER = "slow-worker"
#: A hung broker: SIGSTOP (its connections stay open and nothing answers), then SIGCONT. Only
#: in a fixed schedule (`--faults`): `FaultSchedule.from_seed` does not draw it, so a seed's
#: drawn schedule, victims and durations stay what they were before it existed.
PAUSE_BROKER = "pause-broker"
KINDS = (KILL_WORKER, PAUSE_WORKER, KILL_BROKER, ADD_WORKERS, REMOVE_WORKER, KILL_CONTROLLER,
         PAUSE_CONTROLLER, SLOW_WORKER, PAUSE_BROKER)
#: How long a PAUSE_BROKER lasts (seconds, seeded): always past the local cluster's 5 s broker
#: session (the broker is fenced and its leaderships move), up to past aiokafka's 40 s request
#: timeout.
BROKER_PAUSE_S = (8.0, 50.0)
#: How much slower the worker of a SLOW_WORKER fault is.
SLOW_FACTOR = 8


def fault_kinds(text: str) -> tuple[str, ...]:
    """Comma-separated fault kinds as a tuple (an argparse type)."""
    kinds = tuple(kind.strip() for kind in text.split(",") if kind.strip())
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown faults {unknown}; known: {', '.join(KINDS)}")
    return kinds


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

    @classmethod
    def spread(cls, kinds: tuple[str, ...], first: float = 0.06,
               last: float = 0.6) -> FaultSchedule:
        """`kinds` in their order, spread evenly over [first, last] of the job (a fixed
        schedule: only the victims and durations come from the seed)."""
        step = (last - first) / max(1, len(kinds) - 1)
        return cls(tuple(ScheduledFault(round(first + i * step, 3), kind)
                         for i, kind in enumerate(kinds)))

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

    def settled(self, min_gap_s: float = 3.0, max_wait_s: float = 60.0,
                overdue: bool = False) -> bool:
        """Ready for the next fault: a few seconds since the last one, and every live worker
        in the group (so victims are real members), or `max_wait_s` gone by regardless, or
        the fault `overdue`: then a slow join (30 s on an overloaded machine, while the job
        goes on) does not hold it until the job has ended."""
        since = time.monotonic() - self.last_fault
        if since < min_gap_s:
            return False
        return (overdue or since >= max_wait_s
                or all(self.fleet.joined(n) for n in self.fleet.live()))

    def inject(self, kind: str) -> None:
        self.last_fault = time.monotonic()
        {KILL_WORKER: self.kill_worker, PAUSE_WORKER: self.pause_worker,
         KILL_BROKER: self.kill_broker, ADD_WORKERS: self.add_workers,
         REMOVE_WORKER: self.remove_worker, KILL_CONTROLLER: self.kill_controller,
         PAUSE_CONTROLLER: self.pause_controller, SLOW_WORKER: self.slow_worker,
         PAUSE_BROKER: self.pause_broker}[kind]()

    def _pick(self) -> str:
        """A live worker, one in the group where two are (all are, unless the fault did not
        wait for every join: see `settled`)."""
        live = self.fleet.live()
        if len(live) < 2:
            raise RuntimeError(f"fewer than two live workers to pick a victim from: {live}")
        joined = [name for name in live if self.fleet.joined(name)]
        return self.rng.choice(joined if len(joined) >= 2 else live)

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

    def pause_broker(self) -> None:
        """SIGSTOP a broker for a seeded `BROKER_PAUSE_S`, then SIGCONT: a hung broker (a GC
        pause, a frozen VM), whose clients' requests wait for their timeouts."""
        broker = self.rng.randint(1, self.cluster.brokers)
        pause_s = round(self.rng.uniform(*BROKER_PAUSE_S), 1)
        self.cluster.signal(broker, signal.SIGSTOP)
        self.timeline.add("SIGSTOP broker", f"broker-{broker}", f"for {pause_s}s")

        def resume() -> None:
            with contextlib.suppress(ProcessLookupError):  # killed -9 meanwhile
                self.cluster.signal(broker, signal.SIGCONT)
            self.timeline.add("SIGCONT broker", f"broker-{broker}", f"after {pause_s}s")

        self._later(pause_s, f"SIGCONT broker-{broker}", resume)

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
