"""A worker runs the batch size its pool's strategy recommends for it (issue 29.5): the
`latency-slo` entry's batch size bounds its batches, never above its own `max_batch`, and a
withdrawn recommendation gives the batches their `max_batch` again."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from inferstream.config import Config
from inferstream.policy import membership
from inferstream.schemas.records import PolicyEntry
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker
from tests.unit.support.memory import MODEL, make_config, new_broker
from tests.unit.support.policies import entry, write
from tests.unit.support.records import put_tasks, results
from tests.unit.support.running import Running

#: Long enough a wait that queued items always fill a batch to its limit.
CONFIG = make_config(partitions=4, task_partitions=4, worker={
    "max_batch": 8, "max_wait_ms": 200.0, "sysinfo_interval_s": 0, "calibration_items": 0})


class Batches(WorkerHooks):
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def after_batch(self, model: str, size: int, seconds: float,
                    version: str | None = None) -> None:
        self.sizes.append(size)


@pytest.fixture
def broker() -> MemoryBroker:
    return new_broker(CONFIG)


@pytest.fixture(autouse=True)
def quick_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(membership, "CHECK_INTERVAL_S", 0.01)


def slo_entry(batch_size: int | None, model: str | None = MODEL) -> PolicyEntry:
    found = entry("w1", 1.0)
    return {**found, "strategy": "latency-slo", "model": model, "batch_size": batch_size,
            "models": [MODEL]}


def run_tasks(broker: MemoryBroker, running: Running, config: Config, tasks: int) -> None:
    before = len(results(broker, config))
    put_tasks(broker, config, tasks, items=10)
    running.wait_for(lambda: len(results(broker, config)) == before + tasks)


def run_with(policy: PolicyEntry, broker: MemoryBroker, running: Running,
             make_worker: Callable[..., Worker]) -> tuple[Worker, Batches]:
    """A worker started under `policy` (its entry) once it has read the entry, and the
    sizes of its batches after 4 tasks of 10 items."""
    write(broker, policy, entry("", 1.0))
    batches = Batches()
    worker = make_worker(CONFIG, hooks=batches)
    running.workers(worker)
    running.wait_for(lambda: worker.membership.table.entry(CONFIG.pool, "w1") is not None)
    running.wait_for(lambda: worker.membership.batch_size == (
        None if policy["model"] is None else (policy["model"], policy["batch_size"])))
    run_tasks(broker, running, CONFIG, 4)
    return worker, batches


def test_the_worker_runs_the_policys_batch_size_and_its_own_again_when_it_goes(
        broker: MemoryBroker, running: Running, make_worker: Callable[..., Worker]) -> None:
    worker, batches = run_with(slo_entry(3), broker, running, make_worker)
    assert max(batches.sizes) == 3, batches.sizes
    batches.sizes.clear()
    write(broker, slo_entry(None), entry("", 1.0))
    running.wait_for(lambda: worker.membership.batch_size == (MODEL, None))
    run_tasks(broker, running, CONFIG, 4)
    assert max(batches.sizes) == 8, batches.sizes


def test_a_recommendation_above_max_batch_stops_at_max_batch(
        broker: MemoryBroker, running: Running, make_worker: Callable[..., Worker]) -> None:
    _, batches = run_with(slo_entry(64), broker, running, make_worker)
    assert max(batches.sizes) == 8, batches.sizes


def test_a_worker_of_several_models_keeps_its_max_batch(
        broker: MemoryBroker, running: Running, make_worker: Callable[..., Worker]) -> None:
    worker, batches = run_with(slo_entry(2, model=None), broker, running, make_worker)
    assert worker.membership.batch_size is None
    assert max(batches.sizes) == 8, batches.sizes
