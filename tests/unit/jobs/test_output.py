"""Reading a job back: `results` streams a large job in bounded memory, first result of each
task wins, output in item order."""

from __future__ import annotations

import base64
import io
import json
import math
import struct
import tracemalloc
from typing import Any

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from inferstream.client.client import Client
from inferstream.jobs import output
from inferstream.jobs.errors import (
    OutputFormatError,
    OutputIncompleteError,
    ResultsDeletedError,
)
from inferstream.jobs.ids import job_time_ms, new_job_id
from inferstream.jobs.output import job_results, output_lines, write_lines
from inferstream.kafka.errors import PartitionReadError
from inferstream.kafka.settings import partition_for
from inferstream.schemas.records import JobEventType, NamedTensor, TaskItem, TaskResult, ok_item
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import CODEC, make_config
from tests.unit.support.records import (
    put_event,
    put_results,
    result_item_name,
    strict_loads,
)


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


def test_results_come_in_item_order_with_the_first_result_of_each_task(
        clients: MemoryKafkaClients) -> None:
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=4, chunk=2, order=[2, 0, 3, 1])
    put_results(clients, config, job_id, tasks=4, chunk=2, order=[0, 2], worker="late")
    put_event(clients, config, job_id, JobEventType.COMPLETED, tasks=4, chunk=2)
    lines = list(Client(config, CODEC, clients).job(job_id).results())
    assert [line["item"] for line in lines] == [result_item_name(i) for i in range(8)]
    assert {line["worker"] for line in lines} == {"w1"}


def test_an_output_line_carries_the_model_version_and_an_embedding_or_tensors() -> None:
    """Lines keep today's keys (top_k empty here) and add the output of other kinds: the
    embedding as a list, each tensor with its data in base64."""
    data = struct.pack("<2f", 0.5, -2.0)
    result = TaskResult(
        job_id="j", task_id=0, attempt=1, worker="w", model="encoder", model_version="3",
        items=[ok_item(TaskItem(index=1, name="b", data=None),
                       tensors=[NamedTensor(name="z", dtype="float32", shape=[2], data=data)]),
               ok_item(TaskItem(index=0, name="a", data=None), embedding=[0.25, 1.5])],
        started_at=0, finished_at=0, decode_seconds=0.0, inference_seconds=0.0)
    buffer = io.StringIO()
    write_lines(output_lines([result]), buffer)
    first, second = (json.loads(line) for line in buffer.getvalue().splitlines())
    assert first == {"job_id": "j", "item": "a", "status": "ok", "top_k": [],
                     "embedding": [0.25, 1.5], "error": None, "worker": "w", "attempt": 1,
                     "model": "encoder", "model_version": "3"}
    assert second["tensors"] == [{"name": "z", "dtype": "float32", "shape": [2],
                                  "data": base64.b64encode(data).decode()}]
    assert "embedding" not in second and second["top_k"] == []
    decoded = np.frombuffer(base64.b64decode(second["tensors"][0]["data"]), "<f4")
    assert decoded.tolist() == [0.5, -2.0]


def test_non_finite_scores_and_embedding_values_are_written_as_null() -> None:
    """A model can answer NaN or inf; the line stays JSON a strict parser reads, the item ok."""
    result = TaskResult(
        job_id="j", task_id=0, attempt=1, worker="w", model="m", model_version=None,
        items=[ok_item(TaskItem(index=0, name="a", data=None),
                       top_k=[{"class_id": 3, "label": "x", "score": math.nan}]),
               ok_item(TaskItem(index=1, name="b", data=None),
                       embedding=[0.5, math.inf, -math.inf])],
        started_at=0, finished_at=0, decode_seconds=0.0, inference_seconds=0.0)
    buffer = io.StringIO()
    assert write_lines(output_lines([result]), buffer) == 2
    first, second = (strict_loads(line) for line in buffer.getvalue().splitlines())
    assert first["status"] == "ok"
    assert first["top_k"] == [{"class_id": 3, "label": "x", "score": None}]
    assert second["embedding"] == [0.5, None, None]


def test_a_result_committed_while_the_reader_looks_up_its_start_is_read(
        clients: MemoryKafkaClients, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the job yet when the lookup by time answers (-1): the reader starts at the
    partition's end as it was before the lookup, so a result written meanwhile is read."""
    config, job_id = make_config(), new_job_id()

    def lookup(consumer: Any, partitions: list[TopicPartition]) -> list[TopicPartition]:
        put_results(clients, config, job_id, tasks=1, chunk=2)  # a worker commits meanwhile
        return [TopicPartition(tp.topic, tp.partition, -1) for tp in partitions]
    monkeypatch.setattr(output, "offsets_for_times", lookup)
    lines = output_lines(job_results(config, job_id, None, CODEC, clients))
    assert [line["item"] for line in lines] == [result_item_name(i) for i in range(2)]


def test_results_of_a_completed_job_missing_a_task_are_an_error(
        clients: MemoryKafkaClients, monkeypatch: pytest.MonkeyPatch) -> None:
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=3, chunk=2, order=[0, 2])
    monkeypatch.setattr(output, "READ_TIMEOUT_S", 0.2)
    with pytest.raises(OutputIncompleteError, match="results of 1 of its 3 tasks"):
        list(job_results(config, job_id, 3, CODEC, clients))
    written = io.StringIO()  # `results --format csv`: no header alone ahead of the error
    with pytest.raises(OutputIncompleteError):
        write_lines(output_lines(job_results(config, job_id, 3, CODEC, clients)), written,
                    "csv")
    assert written.getvalue() == ""


def test_a_lookup_the_cluster_refuses_is_a_one_line_error(
        clients: MemoryKafkaClients, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_args: Any) -> list[TopicPartition]:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    monkeypatch.setattr(output, "offsets_for_times", refused)
    job_id = new_job_id()
    with pytest.raises(PartitionReadError, match=f"cannot find where job {job_id} begins in "
                       "t.results: .*TOPIC_AUTHORIZATION_FAILED"):
        list(job_results(make_config(), job_id, None, CODEC, clients))


def test_results_that_retention_deleted_are_said_to_be_gone(
        broker: MemoryBroker, clients: MemoryKafkaClients,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A completed job whose first results the broker deleted (retention.ms, DeleteRecords):
    `results` waited 600 s for them, then said they were not read back in time; it says at
    once that they are gone and where the partition starts now."""
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=3, chunk=2)
    index = partition_for(job_id, config.partitions)
    broker.delete_records(config.topic("results"), index, 2)
    monkeypatch.setattr(output, "READ_TIMEOUT_S", 1.0)  # without the check: the wait's error
    with pytest.raises(ResultsDeletedError, match=(
            f"job {job_id} completed, but the results of 2 of its 3 tasks are gone: "
            f"t.results partition {index} starts at offset 2, the records before it were "
            "deleted \\(the topic's retention.ms or retention.bytes\\)")):
        list(job_results(config, job_id, 3, CODEC, clients))


def test_results_all_deleted_are_said_to_be_gone(
        broker: MemoryBroker, clients: MemoryKafkaClients,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the partition kept (its log start is its end): gone, not waited for."""
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=2, chunk=2)
    broker.delete_records(config.topic("results"), partition_for(job_id, config.partitions), 2)
    monkeypatch.setattr(output, "READ_TIMEOUT_S", 1.0)
    with pytest.raises(ResultsDeletedError, match="the results of 2 of its 2 tasks are gone"):
        list(job_results(config, job_id, 2, CODEC, clients))


def test_records_deleted_before_the_job_leave_its_results_whole(
        broker: MemoryBroker, clients: MemoryKafkaClients,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only records older than the job deleted: its results are read whole, and one it
    misses is waited for as before (not taken for deleted)."""
    config, job_id = make_config(), new_job_id()
    topic, index = config.topic("results"), partition_for(job_id, config.partitions)
    an_hour_before = (job_time_ms(job_id) or 0) - 3_600_000
    for _ in range(2):
        broker.produce(topic, index, b"older", b"older job's result", an_hour_before)
    broker.delete_records(topic, index, 1)
    put_results(clients, config, job_id, tasks=3, chunk=2, order=[0, 2])
    assert [result["task_id"] for result in job_results(config, job_id, None, CODEC,
                                                         clients)] == [0, 2]
    monkeypatch.setattr(output, "READ_TIMEOUT_S", 0.2)
    with pytest.raises(OutputIncompleteError, match="results of 1 of its 3 tasks were not"):
        list(job_results(config, job_id, 3, CODEC, clients))


@pytest.mark.parametrize("answer", [{"embedding": [0.5, -0.5]},
                                    {"tensors": [{"name": "box", "dtype": "int32",
                                                  "shape": [2], "data": b"\\0" * 8}]}])
def test_csv_of_items_answered_without_classes_is_refused_not_empty(
        answer: dict[str, Any]) -> None:
    """A row of empty class columns for each embedding hid the job's outputs: the format
    says it cannot hold them, before any header, and names the formats that can."""
    item = {"index": 0, "name": "a.jpg", "status": "OK", "error": None, "top_k": [],
            "embedding": None, "tensors": [], **answer}
    result = {"job_id": "j", "task_id": 0, "attempt": 1, "worker": "w", "model": "faces",
              "model_version": "2", "items": [item]}
    buffer = io.StringIO()
    with pytest.raises(OutputFormatError, match=r"answered with .*use --format jsonl or npz"):
        write_lines(output_lines([result]), buffer, "csv")
    assert buffer.getvalue() == ""
