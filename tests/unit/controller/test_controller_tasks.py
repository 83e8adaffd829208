"""How the controller places and sizes a job's tasks, on the in-memory transport: spread
evenly over the pool's task partitions, cut to the job's chunk size, else the policy's task
size for the pool, else the default."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

import pytest

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.controller.replica import Controller
from inferstream.controller.sizing import (
    SizeSource,
    TaskSize,
    choose_task_size,
)
from inferstream.kafka.topics import topic_specs
from inferstream.policy.view import NO_POLICY, PolicyView
from inferstream.schemas.records import Job, Task, read_record
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.policies import FixedPolicy
from tests.unit.support.pool import Responder
from tests.unit.support.records import assert_completed_exactly, settled
from tests.unit.support.running import Running

RunJob = Callable[..., MemoryBroker]


@pytest.fixture
def run_job(clients: MemoryKafkaClients, running: Running,
            make_controller: Callable[..., Controller],
            make_responder: Callable[..., Responder]) -> RunJob:
    def run(config: Config, items: int, chunk_size: int | None,
            policy: PolicyView = NO_POLICY) -> MemoryBroker:
        """One job of `items` items run to completion, a responder standing in for the
        pool; the broker holds its tasks."""
        broker = clients.broker
        broker.create_topics(topic_specs(config))
        names = [f"item-{i:02d}" for i in range(items)]
        job = Client(config, CODEC, clients).submit(MODEL, names, chunk_size=chunk_size)
        make_responder(config)
        running.controller(make_controller(config, policy))
        running.until(settled(broker, config))
        tasks = len(broker.values(config.task_topic()))
        assert_completed_exactly(broker, config, job, items=items, tasks=tasks)
        return broker
    return run


def task_sizes(broker: MemoryBroker, config: Config) -> list[int]:
    """Items per task, in task id order."""
    tasks = sorted((read_record(CODEC, v, Task) for v in broker.values(config.task_topic())),
                   key=lambda t: t["task_id"])
    return [len(t["items"]) for t in tasks]


def test_a_jobs_tasks_are_spread_within_one_over_the_task_partitions(run_job: RunJob) -> None:
    tasks, partitions = 100, 12  # 8 or 9 tasks on each partition
    # topics of their own (another prefix) on the test's broker, with 12 task partitions
    config = make_config(topic_prefix="wide.", task_partitions=partitions)
    broker = run_job(config, items=tasks, chunk_size=1)
    per_partition = Counter({p: len(broker.values(config.task_topic(), p))
                             for p in range(partitions)})
    assert sum(per_partition.values()) == tasks
    assert max(per_partition.values()) - min(per_partition.values()) <= 1, per_partition
    ids = sorted(read_record(CODEC, v, Task)["task_id"] for v in broker.values(config.task_topic()))
    assert ids == list(range(tasks))


def test_a_job_without_a_chunk_size_gets_tasks_of_the_policys_size_for_its_pool(
        run_job: RunJob, caplog: pytest.LogCaptureFixture) -> None:
    asked: list[str] = []

    def size(name: str) -> int:
        asked.append(name)
        return 7

    config = make_config()
    with caplog.at_level(logging.INFO, "inferstream.controller"):
        broker = run_job(config, items=20, chunk_size=None,
                         policy=FixedPolicy(task_size=size))
    assert task_sizes(broker, config) == [7, 7, 6]
    assert asked == [config.pool]
    assert "task_size=7 (policy)" in caplog.text


def test_a_jobs_own_chunk_size_beats_the_policy(run_job: RunJob) -> None:
    config = make_config()
    broker = run_job(config, items=10, chunk_size=3, policy=FixedPolicy(task_size=7))
    assert task_sizes(broker, config) == [3, 3, 3, 1]


def test_without_a_policy_a_job_gets_the_default(run_job: RunJob) -> None:
    config = make_config()
    assert config.controller.default_chunk_size == 32
    broker = run_job(config, items=40, chunk_size=None)
    assert task_sizes(broker, config) == [32, 8]


def _unanswerable(_pool: str) -> int | None:
    raise LookupError("policy table not loaded yet")


@pytest.mark.parametrize("policy", [NO_POLICY, FixedPolicy(task_size=None),
                                    FixedPolicy(task_size=0), FixedPolicy(task_size=_unanswerable)])
def test_a_policy_without_an_answer_for_the_pool_means_the_default(policy: PolicyView) -> None:
    job = Job(job_id="j", model=MODEL, model_version=None, pool="gpu", top_k=1, chunk_size=0,
              inputs=["/a"], inline_items=[], submitted_at=0, submitter="", output_path=None,
              priority=0, weight=1.0)
    assert choose_task_size(job, policy, 32, 64) == TaskSize(32, SizeSource.DEFAULT)
    assert choose_task_size(job, FixedPolicy(task_size=9), 32, 64) == TaskSize(
        9, SizeSource.POLICY)
    negative = Job(**{**job, "chunk_size": -2})  # left as it is for admission to reject
    assert choose_task_size(negative, FixedPolicy(task_size=9), 32, 64) == TaskSize(
        -2, SizeSource.JOB)


def test_every_task_size_is_at_most_max_chunk_size() -> None:
    """A policy that measured a model of no compute asks for 100,000s of items a task; a job
    may ask for as many: the controller's max_chunk_size bounds both, and the default."""
    job = Job(job_id="j", model=MODEL, model_version=None, pool="gpu", top_k=1, chunk_size=0,
              inputs=["/a"], inline_items=[], submitted_at=0, submitter="", output_path=None,
              priority=0, weight=1.0)
    huge = FixedPolicy(task_size=156_289)
    assert choose_task_size(job, huge, 32, 8192) == TaskSize(8192, SizeSource.POLICY, True)
    assert str(choose_task_size(job, huge, 32, 8192)) == "policy, capped by max_chunk_size"
    asked = Job(**{**job, "chunk_size": 10_000})
    assert choose_task_size(asked, huge, 32, 8192) == TaskSize(8192, SizeSource.JOB, True)
    assert choose_task_size(job, NO_POLICY, 32, 16) == TaskSize(16, SizeSource.DEFAULT, True)
    assert choose_task_size(job, FixedPolicy(task_size=8192), 32, 8192) == TaskSize(
        8192, SizeSource.POLICY)


def test_a_job_of_fast_items_is_cut_at_max_chunk_size(run_job: RunJob) -> None:
    config = make_config(controller={"max_chunk_size": 4})
    broker = run_job(config, items=10, chunk_size=None, policy=FixedPolicy(task_size=100_000))
    assert task_sizes(broker, config) == [4, 4, 2]


def test_a_replica_taking_a_job_over_keeps_its_task_size_when_the_policy_changed(
        clients: MemoryKafkaClients, running: Running,
        make_controller: Callable[..., Controller],
        make_responder: Callable[..., Responder]) -> None:
    """The size chosen at acceptance travels in the ledger: the next replica, whose policy
    now says 5, cuts the rest of the job in 4s too, with no item issued twice or skipped."""
    config = make_config(controller={"tasks_per_round": 1})
    names = [f"item-{i:02d}" for i in range(18)]
    job = Client(config, CODEC, clients).submit(MODEL, names)
    responder = make_responder(config, pause_after=2)
    running.controller(make_controller(config, FixedPolicy(task_size=4)))
    running.until(responder.paused.is_set)

    responder.resume.set()
    running.controller(make_controller(config, FixedPolicy(task_size=5)))
    running.until(settled(clients.broker, config))
    assert task_sizes(clients.broker, config) == [4, 4, 4, 4, 2]
    assert_completed_exactly(clients.broker, config, job, items=18, tasks=5)
