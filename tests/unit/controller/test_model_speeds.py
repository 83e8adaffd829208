"""A pool serving a slow and a fast model (issue 27.6): each job's tasks are sized for its own
model, and deadlines and pacing plan a task of a model by that model's speed on the worker,
not by the worker's one capacity; a worker's results of one model say nothing of another's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from inferstream.client.client import Client
from inferstream.controller.deadlines import Deadlines
from inferstream.controller.declines import PoolView
from inferstream.controller.pacing import Pacing
from inferstream.controller.replica import Controller
from inferstream.controller.sizing import SizeSource, TaskSize, choose_task_size
from inferstream.controller.speculation import MIN_RESULTS, SLOW_FOR_S
from inferstream.kafka.topics import topic_specs
from inferstream.policy.entries import pool_entries
from inferstream.policy.strategies import StrategySettings, ThroughputStrategy, WorkerView
from inferstream.policy.table import PolicyTable
from inferstream.policy.view import WorkerPolicy
from inferstream.schemas.records import (
    Job,
    PolicyEntry,
    PolicyKind,
    Task,
    TaskItem,
    WorkerHealth,
    plain_record,
    read_record,
)
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.memory import CODEC, make_config
from tests.unit.support.policies import FixedPolicy
from tests.unit.support.pool import Responder
from tests.unit.support.records import settled
from tests.unit.support.running import Running

SLOW, FAST = "googlenet", "alexnet"
#: worker -> task partitions it owns
OWNERS = {"a": [0, 1], "b": [2, 3]}
ITEMS = 10


def policy_of(rates: dict[str, dict[str, float]], task_seconds: float = 1.0) -> PolicyTable:
    """The policy table sysinfo writes for workers serving models at these items/s."""
    views = [WorkerView(worker=w, pool="default", health=WorkerHealth.HEALTHY,
                        models=tuple(sorted(r)), measured_items_per_s=sum(r.values()),
                        calibration_items_per_s=None, model_rates=r) for w, r in rates.items()]
    table = PolicyTable(make_config(), codec=CODEC, max_age_s=None)
    for entry in pool_entries("default", views, ThroughputStrategy(), StrategySettings(),
                              task_seconds, 1):
        key = "default" if entry["kind"] == PolicyKind.POOL else f"default/{entry['worker']}"
        table.apply(key.encode(), CODEC.encode("PolicyEntry", plain_record(PolicyEntry, entry)))
    return table


def test_the_slow_models_jobs_get_small_tasks_and_the_fast_models_big_ones(
        clients: MemoryKafkaClients, running: Running,
        make_controller: Callable[..., Controller],
        make_responder: Callable[..., Responder]) -> None:
    config = make_config()
    clients.broker.create_topics(topic_specs(config))
    policy = policy_of({"a": {SLOW: 4.0, FAST: 400.0}, "b": {SLOW: 6.0, FAST: 40.0},
                        "c": {FAST: 100.0}, "d": {SLOW: 5.0}})
    client = Client(config, CODEC, clients)
    jobs = {model: client.submit(model, [f"{model}-{i:03d}" for i in range(120)])
            for model in (SLOW, FAST, "resnet50")}
    make_responder(config)
    running.controller(make_controller(config, policy))
    running.until(settled(clients.broker, config, jobs=len(jobs)))

    sizes: dict[str, Counter[int]] = {}
    for value in clients.broker.values(config.task_topic()):
        task = read_record(CODEC, value, Task)
        sizes.setdefault(task["model"], Counter())[len(task["items"])] += 1
    assert set(jobs) == set(sizes)
    assert sizes[SLOW] == {5: 24}  # the median worker of the slow model: 5 items/s
    assert sizes[FAST] == {100: 1, 20: 1}  # of the fast one: 100 items/s
    # a model the policy has no figure of: the pool's size, the median of its workers'
    # (404, 46, 100 and 5 items/s, all models together)
    assert sizes["resnet50"] == {73: 1, 47: 1}


def test_a_job_pinned_to_a_version_is_sized_for_that_version() -> None:
    policy = policy_of({"a": {"faces:1": 8.0, "faces:2": 80.0}})
    job = Job(job_id="j", model="faces", model_version=1, pool="default", top_k=1,
              chunk_size=0, inputs=["/a"], inline_items=[], submitted_at=0, submitter="",
              output_path=None, priority=0, weight=1.0)
    assert choose_task_size(job, policy, 32, 8192) == TaskSize(8, SizeSource.POLICY)
    newest = Job(**{**job, "model_version": None})
    assert choose_task_size(newest, policy, 32, 8192) == TaskSize(80, SizeSource.POLICY)


def task(task_id: int, model: str) -> Task:
    items = [TaskItem(index=task_id * ITEMS + i, name=f"item-{task_id}-{i}", data=None)
             for i in range(ITEMS)]
    return Task(job_id="job-1", task_id=task_id, attempt=1, pool="default", model=model,
                model_version=None, top_k=1, items=items, issued_at=0, deadline_ms=None,
                home_partition=0)


def tables(policy: dict[str, WorkerPolicy]) -> tuple[Deadlines, Pacing]:
    view = PoolView(describe=lambda _group: OWNERS)
    for worker in OWNERS:
        view.record_result(worker, SLOW)
        view.record_result(worker, FAST)
    deadlines = Deadlines(view, FixedPolicy(policy), lambda pool: f"{pool}.workers",
                          slack=2.0, floor_s=10.0, max_attempts=4,
                          speculation_floor_s=0.1, speculation_cap=0.1)
    return deadlines, Pacing(deadlines, view, FixedPolicy(policy), ahead_s=2.0)


#: a: fast at FAST, slow at SLOW; b: as fast at both. Capacities: all models together.
SPEEDS = {"a": WorkerPolicy(0.5, True, 202.0, (FAST, SLOW), {SLOW: 2.0, FAST: 200.0}),
          "b": WorkerPolicy(0.5, True, 100.0, (FAST, SLOW), {SLOW: 50.0, FAST: 50.0})}


def test_a_task_of_the_slow_model_is_given_that_models_time_on_its_worker() -> None:
    deadlines, _ = tables(SPEEDS)
    deadlines.issued(task(0, SLOW), 0, OWNERS["a"][0], 0)
    # 10 items at 2 items/s, x2 slack, + 10 s: due at 20 s (at a's capacity, 10.2 s)
    assert deadlines.late(19_000) == []
    (late,) = deadlines.late(21_000)
    assert late.partition in OWNERS["b"] and "past its deadline" in late.reason


def test_results_of_one_model_do_not_make_another_models_tasks_late() -> None:
    deadlines, _ = tables(SPEEDS)
    deadlines.issued(task(0, FAST), 0, OWNERS["a"][0], 0)
    for _ in range(MIN_RESULTS):
        deadlines.observe("a", SLOW, ITEMS, 5.0)  # 0.5 s per item: the slow model as planned
    assert deadlines.late(1_000) == []
    for _ in range(MIN_RESULTS):  # 50 ms per item: 10x what the task was given
        deadlines.observe("a", FAST, ITEMS, 0.5)
    assert deadlines.late(1_000) == []  # slow from now, for SLOW_FOR_S
    (late,) = deadlines.late(1_000 + int(SLOW_FOR_S * 1000))
    assert "10.0x what the task was given" in late.reason


@pytest.mark.parametrize(("model", "expected"), [(SLOW, {"a": 1, "b": 10}),
                                                 (FAST, {"a": 40, "b": 10})])
def test_pacing_keeps_each_worker_ahead_by_the_jobs_models_speed(
        model: str, expected: dict[str, int]) -> None:
    _, pacing = tables(SPEEDS)
    pacing.begin()
    placed = []
    for task_id in range(100):
        partition = pacing.place("default", model, None, 4, "job-1", task_id, ITEMS)
        if partition is None:
            break
        placed.append(partition)
    owner = {p: w for w, parts in OWNERS.items() for p in parts}
    # 2 s ahead: a holds 4 slow items or 400 fast ones, b 100 of either, in tasks of 10
    assert Counter(owner[p] for p in placed) == expected
