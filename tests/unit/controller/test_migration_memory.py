"""Issue 12.4 on the in-memory transport: a worker far slower than the policy says has its
tasks re-issued elsewhere once they are late; the first committed result of each task wins,
the late ones are dropped, and each item is in the output once."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.controller.replica import Controller
from inferstream.models import load_model
from inferstream.policy.view import WorkerPolicy
from inferstream.schemas.records import (
    Task,
    TaskControl,
    TaskControlReason,
    read_record,
    read_result,
)
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.memory import CODEC, make_config
from tests.unit.support.policies import FixedPolicy
from tests.unit.support.records import consumed, settled
from tests.unit.support.running import Running

FAST, SLOW = "sim:ms=1", "sim:ms=1,slow_after=0,slow_factor=100"


def config_of(worker_id: str = "w") -> Config:
    return make_config(
        worker={"models": ("sim:ms=1",), "worker_id": worker_id, "sysinfo_interval_s": 0,
                "max_batch": 1},
        controller={"migration_floor_s": 0.3, "migration_check_s": 0.05,
                    "speculation_floor_s": 0.1})


def both_workers_equal(_pool: str) -> dict[str, WorkerPolicy]:
    """The policy as sysinfo saw it before the slowdown: 1,000 items/s each."""
    return {"fast": WorkerPolicy(0.5, True, 1000.0), "slow": WorkerPolicy(0.5, True, 1000.0)}


def test_late_tasks_complete_elsewhere_and_late_results_are_dropped(
        clients: MemoryKafkaClients, running: Running, make_worker: Callable[..., Worker],
        make_controller: Callable[..., Controller]) -> None:
    """The fast and the slow worker; once each owns a task partition, the job and the
    controller, until the job is done and every task's every attempt settled."""
    config = config_of()
    pool = [make_worker(config_of("fast"), load_model(FAST)),
            make_worker(config_of("slow"), load_model(SLOW))]
    running.workers(*pool)
    running.wait_for(lambda: all(getattr(w, "ownership", None) and w.ownership.committers
                                 for w in pool))
    names = [f"item-{i:02d}" for i in range(16)]
    job = Client(config, CODEC, clients).submit("sim:ms=1", names, chunk_size=2)
    running.controller(make_controller(config, FixedPolicy(both_workers_equal)))
    running.until(lambda: settled(clients.broker, config)() and consumed(
        clients.broker, config.worker_group(), config.task_topic()))

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
    # a late attempt the slow worker finished while the job ran is in the topic, dropped by
    # the controller; one it finished after the job completed is committed with no result
    # (worker.source); the output has each item once (above)
    assert set(by_task) == set(range(8)) and max(by_task.values()) <= 2
    assert {line["worker"] for line in lines} >= {"fast"}
