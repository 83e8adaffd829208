"""Records put on the in-memory broker as the other roles write them, and read back."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from inferstream.client.client import Job as ClientJob
from inferstream.config import Config
from inferstream.kafka.settings import partition_for
from inferstream.schemas.records import (
    ItemResult,
    Job,
    JobEvent,
    JobEventType,
    LedgerEntry,
    LedgerKind,
    LedgerStatus,
    Prediction,
    Task,
    TaskItem,
    TaskResult,
    encode_result,
    error_item,
    new_task,
    now_ms,
    ok_item,
    read_record,
)
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import CODEC, MODEL

JOB_ID = "20250101-000000-0000abcd"
TOP = [Prediction(class_id=c, label=f"label of class {c}", score=0.1) for c in range(5)]


def put_tasks(broker: MemoryBroker, config: Config, count: int, items: int = 2) -> None:
    """`count` tasks of job `JOB_ID`, spread over the task partitions as the controller does;
    task `t`'s items are named `item-t-i`."""
    job = Job(job_id=JOB_ID, model=MODEL, model_version=None, pool=config.pool, top_k=1,
              chunk_size=items, inputs=[], inline_items=[], submitted_at=0, submitter="test",
              output_path=None, priority=0, weight=1.0)
    for task_id in range(count):
        names = [TaskItem(index=task_id * items + i, name=f"item-{task_id}-{i}", data=None)
                 for i in range(items)]
        broker.produce(config.task_topic(), task_id % config.partitions, JOB_ID.encode(),
                       CODEC.encode("Task", new_task(job, task_id, names)))


def result_item_name(index: int) -> str:
    """The name of item `index` in the results `put_results` writes."""
    return f"/data/images/n{index:07d}.JPEG"


def put_results(clients: MemoryKafkaClients, config: Config, job_id: str, tasks: int,
                chunk: int, order: list[int] | None = None, worker: str = "w1",
                ok: bool = True, answer: Callable[[TaskItem], ItemResult] | None = None
                ) -> None:
    """One TaskResult per task (in `order`, default task order), as workers commit them;
    each item's outcome is `answer`'s (default: TOP, or an error where not `ok`)."""
    producer = clients.producer({})
    topic = config.topic("results")
    for task_id in order if order is not None else range(tasks):
        items = [TaskItem(index=i, name=result_item_name(i), data=None)
                 for i in range(task_id * chunk, (task_id + 1) * chunk)]
        result = TaskResult(job_id=job_id, task_id=task_id, attempt=1, worker=worker,
                            model="sim:ms=0", model_version="sim",
                            items=[answer(i) if answer is not None else ok_item(i, TOP) if ok
                                   else error_item(i, "not an image") for i in items],
                            started_at=0, finished_at=0, decode_seconds=0.0,
                            inference_seconds=0.0)
        producer.produce(topic, encode_result(CODEC, result), job_id.encode(),
                         partition=partition_for(job_id, config.partitions))


def put_event(clients: MemoryKafkaClients, config: Config, job_id: str, kind: JobEventType,
              tasks: int = 0, chunk: int = 0, ok: bool = True, model: str = "sim:ms=0",
              version: int | None = None, priority: int = 0, weight: float = 1.0,
              reason: str | None = None) -> None:
    """The job's event as the controller writes it (ACCEPTED, COMPLETED, ...), of `model`
    on `version`, at `priority` and `weight`, ended for `reason`."""
    items = tasks * chunk
    event = JobEvent(job_id=job_id, type=kind, timestamp=now_ms(), model=model,
                     model_version=version, reason=reason, total_items=items, total_tasks=tasks,
                     done_items=items, ok_items=items if ok else 0,
                     error_items=0 if ok else items, rate_items_per_s=None, home_partition=None,
                     priority=priority, weight=weight)
    clients.producer({}).produce(config.topic("job-events"), CODEC.encode("JobEvent", event),
                                 job_id.encode(),
                                 partition=partition_for(job_id, config.partitions))


def results(broker: MemoryBroker, config: Config, read_committed: bool = True
            ) -> list[TaskResult]:
    """The TaskResults on the results topic (declines would not read as one)."""
    values = broker.values(config.topic("results"), read_committed=read_committed)
    return [read_record(CODEC, value, TaskResult) for value in values]


def task_counts(found: list[TaskResult]) -> Counter[int]:
    return Counter(result["task_id"] for result in found)


def events(broker: MemoryBroker, config: Config, kind: JobEventType) -> list[Any]:
    """The committed job events of type `kind`."""
    found = [read_record(CODEC, v, JobEvent) for v in broker.values(config.topic("job-events"))]
    return [event for event in found if event["type"] == kind]


def done_entries(broker: MemoryBroker, config: Config) -> Counter[int]:
    """How many DONE ledger entries each task has."""
    entries = [read_record(CODEC, v, LedgerEntry)
               for v in broker.values(config.topic("controller-ledger"))]
    return Counter(e["task_id"] for e in entries
                   if e["kind"] == LedgerKind.TASK and e["status"] == LedgerStatus.DONE)


def issued_tasks(broker: MemoryBroker, config: Config) -> Counter[int]:
    return Counter(read_record(CODEC, v, Task)["task_id"]
                   for v in broker.values(config.task_topic()))


def consumed(broker: MemoryBroker, group: str, *topics: str) -> bool:
    """Group `group` has committed an offset past every committed record of `topics`."""
    for topic in topics:
        for partition in range(broker.partition_count(topic)):
            committed = broker.committed_offset(group, topic, partition) or 0
            if any(r.offset >= committed for r in broker.records(topic, partition)):
                return False
    return True


def all_committed(broker: MemoryBroker, config: Config) -> Callable[[], bool]:
    def done() -> bool:
        """every task's offset committed: its result is in, no task is left to redo"""
        return consumed(broker, config.worker_group(), config.task_topic())
    return done


def item_names(items: int) -> list[str]:
    """The absolute names of items `item-00`... as the client submits them from here."""
    return [os.path.abspath(f"item-{i:02d}") for i in range(items)]


def assert_completed_exactly(broker: MemoryBroker, config: Config, job: ClientJob, items: int,
                             tasks: int) -> None:
    """One ACCEPTED and one COMPLETED event with exact counts; one DONE per task."""
    assert len(events(broker, config, JobEventType.ACCEPTED)) == 1
    (completed,) = events(broker, config, JobEventType.COMPLETED)
    assert (completed["total_items"], completed["done_items"]) == (items, items)
    assert completed["total_tasks"] == tasks
    assert done_entries(broker, config) == dict.fromkeys(range(tasks), 1)
    assert issued_tasks(broker, config) == dict.fromkeys(range(tasks), 1)
    assert sorted(line["item"] for line in job.results()) == item_names(items)


def settled(broker: MemoryBroker, config: Config, kind: JobEventType = JobEventType.COMPLETED,
            answers: int | None = None, jobs: int = 1) -> Callable[[], bool]:
    """A condition: `jobs` job events `kind` are out, the pool wrote its `answers` results
    (None: any), and the controllers have read every job record and result there is."""
    def done() -> bool:
        """{jobs} job events {kind}, {answers} results, all of them read by the controllers"""
        found = broker.values(config.topic("results"))
        return (len(events(broker, config, kind)) >= jobs
                and (answers is None or len(found) == answers)
                and consumed(broker, config.controller_group(), config.topic("jobs"),
                             config.topic("results")))
    done.__doc__ = (done.__doc__ or "").format(kind=kind, answers=answers, jobs=jobs)
    return done


def strict_loads(text: str | bytes) -> Any:
    """JSON as a strict parser (JavaScript's JSON.parse) reads it: the bare NaN and Infinity
    that Python's json writes are refused."""
    def refuse(word: str) -> None:
        raise ValueError(f"{word} is not JSON")
    return json.loads(text, parse_constant=refuse)
