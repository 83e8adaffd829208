"""How the controller places and sizes a job's tasks, on the in-memory transport: spread
evenly over the pool's task partitions, cut to the job's chunk size, else the policy's task
size for the pool, else the default."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator

import pytest

from inferstream.config import Config
from inferstream.schemas.records import read_task
from inferstream.streams.controller.controller import Controller
from inferstream.streams.kafka.topics import topic_specs
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.test_controller_memory import CODEC, Responder, make_config, submit


@pytest.fixture
def pool() -> Iterator[list[Responder]]:
    """Responders standing in for the pool's workers, stopped at teardown."""
    started: list[Responder] = []
    yield started
    for responder in started:
        responder.done.set()
        responder.join(5)


def run_job(config: Config, pool: list[Responder], items: int, chunk_size: int
            ) -> MemoryBroker:
    """One job of `items` items run to completion; the broker holds its tasks."""
    clients = MemoryKafkaClients(MemoryBroker())
    clients.broker.create_topics(topic_specs(config))
    submit(clients, config, items=items, chunk_size=chunk_size)
    responder = Responder(clients, config)
    responder.start()
    pool.append(responder)
    Controller(config, codec=CODEC, clients=clients).run()
    return clients.broker


@pytest.mark.parametrize(("tasks", "partitions"), [(23, 7), (5, 7), (120, 12)])
def test_a_jobs_tasks_are_spread_within_one_over_the_task_partitions(
        pool: list[Responder], tasks: int, partitions: int) -> None:
    config = dataclasses.replace(make_config(), task_partitions=partitions)
    broker = run_job(config, pool, items=tasks, chunk_size=1)
    per_partition = Counter({p: len(broker.values(config.task_topic(), p))
                             for p in range(partitions)})
    assert sum(per_partition.values()) == tasks
    assert max(per_partition.values()) - min(per_partition.values()) <= 1, per_partition
    ids = sorted(read_task(CODEC, v)["task_id"] for v in broker.values(config.task_topic()))
    assert ids == list(range(tasks))
