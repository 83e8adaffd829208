"""Issue 12.4 on the in-memory transport: a worker far slower than the policy says has its
tasks re-issued elsewhere once they are late; the first committed result of each task wins,
the late ones are dropped, and each item is in the output once."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from inferstream.client.client import Client, Job
from inferstream.config import Config, ControllerConfig, WorkerConfig
from inferstream.controller.replica import Controller
from inferstream.kafka.topics import topic_specs
from inferstream.models import load_model
from inferstream.policy.view import WorkerPolicy
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    Task,
    TaskControl,
    TaskControlReason,
    read_record,
    read_result,
)
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.worker import new_worker
from tests.unit.support.policies import FixedPolicy

CODEC = Codec(None)
FAST, SLOW = "sim:ms=1", "sim:ms=1,slow_after=0,slow_factor=100"


def make_config(worker_id: str = "w", idle_exit_s: float = 1.0, **controller: object
                ) -> Config:
    return Config(
        bootstrap_servers="mem:1", topic_prefix="t.", partitions=2, task_partitions=2,
        worker=WorkerConfig(models=("sim:ms=1",), worker_id=worker_id, idle_exit_s=idle_exit_s,
                            max_wait_ms=1.0, decode_threads=2, sysinfo_interval_s=0,
                            max_batch=1),
        controller=ControllerConfig(idle_exit_s=0.5, watchdog_s=None, progress_interval_s=0.0,
                                    migration_floor_s=0.3, migration_check_s=0.05,
                                    **controller))  # type: ignore[arg-type]


@pytest.fixture
def clients() -> MemoryKafkaClients:
    broker = MemoryBroker()
    broker.create_topics(topic_specs(make_config()))
    return MemoryKafkaClients(broker)


def both_workers_equal(_pool: str) -> dict[str, WorkerPolicy]:
    """The policy as sysinfo saw it before the slowdown: 1,000 items/s each."""
    return {"fast": WorkerPolicy(0.5, True, 1000.0), "slow": WorkerPolicy(0.5, True, 1000.0)}


def run(clients: MemoryKafkaClients, config: Config, submit: Callable[[], Job]) -> Job:
    """The fast and the slow worker on one event loop in a thread; once each owns a task
    partition, `submit` and the controller here."""
    pool = [new_worker(make_config("fast"), load_model(FAST), codec=CODEC, clients=clients),
            new_worker(make_config("slow"), load_model(SLOW), codec=CODEC, clients=clients)]

    async def serve() -> None:
        await asyncio.gather(*(worker.run() for worker in pool))

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="workers")
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not all(getattr(w, "ownership", None) and w.ownership.committers for w in pool):
            assert time.monotonic() < deadline, "the workers never shared the partitions"
            time.sleep(0.02)
        job = submit()
        Controller(config, codec=CODEC, clients=clients,
                   policy=FixedPolicy(both_workers_equal)).run()
    finally:
        thread.join(60)  # the workers exit once idle
    return job


def test_late_tasks_complete_elsewhere_and_late_results_are_dropped(
        clients: MemoryKafkaClients) -> None:
    config = make_config()
    names = [f"item-{i:02d}" for i in range(16)]
    job = run(clients, config, lambda: Client(config, CODEC, clients).submit(
        "sim:ms=1", names, chunk_size=2))

    status = job.wait(timeout_s=5)
    assert (status.total_items, status.ok_items) == (16, 16)
    lines = list(job.results())
    assert sorted(str(line["item"]) for line in lines) == [os.path.abspath(n) for n in names]
    tasks = [read_record(CODEC, v, Task) for v in clients.broker.values("t.tasks.default")]
    migrated = [t for t in tasks if t["attempt"] > 1]
    assert migrated, "the slow worker's tasks were never re-issued"
    controls = [read_record(CODEC, v, TaskControl) for v in clients.broker.values("t.task-control")]
    reasons = Counter(c["reason"] for c in controls)
    assert reasons[TaskControlReason.MIGRATED] == len(migrated)
    assert reasons[TaskControlReason.FINISHED] == 1
    results = [read_result(CODEC, v) for v in clients.broker.values("t.results")]
    by_task = Counter(r["task_id"] for r in results)
    # the slow worker finished some of its late attempts anyway: their results are in the
    # topic, dropped by the controller; the output has each item once (above)
    assert set(by_task) == set(range(8)) and max(by_task.values()) == 2
    assert {line["worker"] for line in lines} >= {"fast"}
