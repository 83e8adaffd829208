"""`tests/chaos/faults.py`: the seeded schedules `make chaos` runs stay what they were, and
the hung-broker fault (PAUSE_BROKER) comes only in a fixed schedule: SIGSTOP of a seeded
broker, SIGCONT of the same one when its seeded pause is over."""

from __future__ import annotations

import argparse
import random
import signal
from pathlib import Path

import pytest

from tests.chaos.faults import (
    BROKER_PAUSE_S,
    KINDS,
    PAUSE_BROKER,
    FaultInjector,
    FaultSchedule,
    Timeline,
    fault_kinds,
)
from tests.chaos.fleets import ChaosCluster, WorkerFleet

#: `make chaos` seeds' drawn schedules as they were before PAUSE_BROKER existed.
PINNED = {
    3: [(0.074, "kill-worker"), (0.126, "remove-worker"), (0.197, "kill-controller"),
        (0.252, "kill-worker"), (0.337, "slow-worker"), (0.399, "add-workers"),
        (0.467, "pause-controller"), (0.529, "pause-worker"), (0.612, "kill-broker")],
    4: [(0.045, "kill-worker"), (0.124, "pause-worker"), (0.209, "kill-controller"),
        (0.273, "pause-controller"), (0.339, "slow-worker"), (0.388, "remove-worker"),
        (0.466, "kill-worker"), (0.525, "add-workers"), (0.589, "kill-broker")],
    6: [(0.076, "remove-worker"), (0.135, "slow-worker"), (0.189, "kill-broker"),
        (0.246, "add-workers"), (0.33, "kill-worker"), (0.387, "pause-worker"),
        (0.478, "kill-controller"), (0.546, "pause-controller"), (0.601, "kill-worker")],
}


@pytest.mark.parametrize("seed", sorted(PINNED))
def test_a_seed_draws_the_schedule_it_drew_before_the_hung_broker_existed(seed: int) -> None:
    drawn = FaultSchedule.from_seed(random.Random(seed))
    assert [(f.at_fraction, f.kind) for f in drawn.faults] == PINNED[seed]


def test_no_drawn_schedule_holds_a_hung_broker() -> None:
    for seed in range(200):
        kinds = {f.kind for f in FaultSchedule.from_seed(random.Random(seed)).faults}
        assert PAUSE_BROKER not in kinds


def test_a_fixed_schedule_names_the_hung_broker() -> None:
    assert PAUSE_BROKER in KINDS
    kinds = fault_kinds(f"kill-worker,{PAUSE_BROKER}")
    assert [f.kind for f in FaultSchedule.spread(kinds).faults] == ["kill-worker", PAUSE_BROKER]
    with pytest.raises(argparse.ArgumentTypeError):
        fault_kinds("hang-broker")


class SignalledCluster(ChaosCluster):
    """A cluster that records the signals its brokers are sent instead of sending them."""

    def __init__(self) -> None:
        super().__init__(Path("/nonexistent"))
        self.sent: list[tuple[int, signal.Signals]] = []

    def signal(self, broker: int, sig: signal.Signals) -> None:
        self.sent.append((broker, sig))


def paused_broker(seed: int) -> tuple[SignalledCluster, FaultInjector]:
    cluster = SignalledCluster()
    fleet = WorkerFleet(None, "sim:ms=1", [])  # type: ignore[arg-type]  # starts no worker
    injector = FaultInjector(random.Random(seed), cluster, fleet, Timeline(lambda: (0, 1)),
                             session_timeout_s=6.0)
    injector.inject(PAUSE_BROKER)
    return cluster, injector


def test_a_hung_broker_is_stopped_then_continued_after_its_seeded_pause() -> None:
    cluster, injector = paused_broker(seed=5)
    (broker, sig), = cluster.sent
    assert sig == signal.SIGSTOP and 1 <= broker <= cluster.brokers
    assert injector.pending
    (follow_up,) = injector.follow_ups
    assert follow_up.what == f"SIGCONT broker-{broker}"
    follow_up.action()
    assert cluster.sent == [(broker, signal.SIGSTOP), (broker, signal.SIGCONT)]
    note = injector.timeline.entries[0].note
    pause_s = float(note.removeprefix("for ").removesuffix("s"))
    assert BROKER_PAUSE_S[0] <= pause_s <= BROKER_PAUSE_S[1]


def test_the_same_seed_hangs_the_same_broker_for_as_long() -> None:
    first, again = paused_broker(seed=9), paused_broker(seed=9)
    assert first[0].sent == again[0].sent
    assert first[1].timeline.entries[0].note == again[1].timeline.entries[0].note
