"""Reading a job back: `results` streams a large job in bounded memory, first result of each
task wins, output in item order."""

from __future__ import annotations

import io
import tracemalloc

import pytest

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.jobs.ids import new_job_id
from inferstream.jobs.output import job_results, output_lines, write_lines
from inferstream.kafka.settings import partition_for
from inferstream.kafka.topics import topic_specs
from inferstream.schemas import Codec
from inferstream.schemas.records import (
    JobEvent,
    JobEventType,
    Prediction,
    TaskItem,
    TaskResult,
    error_item,
    now_ms,
    ok_item,
)
from inferstream.testing import MemoryBroker, MemoryKafkaClients

CODEC = Codec(None)
TOP = [Prediction(class_id=c, label=f"label of class {c}", score=0.1) for c in range(5)]


def make_config() -> Config:
    return Config(bootstrap_servers="mem:1", topic_prefix="t.", partitions=2,
                  task_partitions=2)


@pytest.fixture
def clients() -> MemoryKafkaClients:
    broker = MemoryBroker()
    broker.create_topics(topic_specs(make_config()))
    return MemoryKafkaClients(broker)


def put_results(clients: MemoryKafkaClients, config: Config, job_id: str, tasks: int,
                chunk: int, order: list[int] | None = None, worker: str = "w1",
                ok: bool = True) -> None:
    """One TaskResult per task (in `order`, default task order), as workers commit them."""
    producer = clients.producer({})
    topic = config.topic("results")
    for task_id in order if order is not None else range(tasks):
        items = [TaskItem(index=i, name=f"/data/images/n{i:07d}.JPEG", data=None)
                 for i in range(task_id * chunk, (task_id + 1) * chunk)]
        result = TaskResult(job_id=job_id, task_id=task_id, attempt=1, worker=worker,
                            model="sim:ms=0",
                            items=[ok_item(i, TOP) if ok else error_item(i, "not an image")
                                   for i in items],
                            started_at=0, finished_at=0, decode_seconds=0.0,
                            inference_seconds=0.0)
        producer.produce(topic, CODEC.encode("TaskResult", result), job_id.encode(),
                         partition=partition_for(job_id, config.partitions))


def test_results_of_a_large_job_are_written_in_bounded_memory(
        clients: MemoryKafkaClients) -> None:
    """6,400 items: decoded all at once they take 11 MiB; streamed, under 1."""
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=200, chunk=32)
    tracemalloc.start()
    try:
        lines = output_lines(job_results(config, job_id, None, CODEC, clients))
        count = write_lines(lines, _Discard())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 200 * 32
    assert peak < 4 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


class _Discard(io.StringIO):
    """A stream that keeps nothing (so only the reader's memory is measured)."""

    def write(self, text: str) -> int:
        return len(text)


def put_event(clients: MemoryKafkaClients, config: Config, job_id: str, kind: JobEventType,
              tasks: int = 0, chunk: int = 0, ok: bool = True) -> None:
    """The job's event as the controller writes it (ACCEPTED, COMPLETED, ...)."""
    items = tasks * chunk
    event = JobEvent(job_id=job_id, type=kind, timestamp=now_ms(), model="sim:ms=0",
                     reason=None, total_items=items, total_tasks=tasks, done_items=items,
                     ok_items=items if ok else 0, error_items=0 if ok else items,
                     rate_items_per_s=None, home_partition=None)
    clients.producer({}).produce(config.topic("job-events"), CODEC.encode("JobEvent", event),
                                 job_id.encode(),
                                 partition=partition_for(job_id, config.partitions))


def test_results_come_in_item_order_with_the_first_result_of_each_task(
        clients: MemoryKafkaClients) -> None:
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=4, chunk=2, order=[2, 0, 3, 1])
    put_results(clients, config, job_id, tasks=4, chunk=2, order=[0, 2], worker="late")
    put_event(clients, config, job_id, JobEventType.COMPLETED, tasks=4, chunk=2)
    lines = list(Client(config, CODEC, clients).job(job_id).results())
    assert [line["item"] for line in lines] == [f"/data/images/n{i:07d}.JPEG"
                                                for i in range(8)]
    assert {line["worker"] for line in lines} == {"w1"}
