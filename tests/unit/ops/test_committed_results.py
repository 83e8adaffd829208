"""The readers that count every committed result, the chaos verifier's `ResultsReader` and the
benchmarks' `CommittedResults`, read a result too large for one record (its pieces, then its
TaskResult with no item) as a job's output does: whole, its items none lost."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import committed

from inferstream.config import Config
from inferstream.schemas.records import TaskItem, TaskResult, encode_result, ok_item
from inferstream.testing import MemoryBroker
from inferstream.testing.clients.sync_consumer import MemoryConsumer
from inferstream.worker.oversize import result_records
from tests.chaos import verifier
from tests.unit.support.memory import CODEC, MODEL, make_config, new_broker

JOB = "job-1"
NAMES = [f"item-{i}" for i in range(6)]


def result(task_id: int, attempt: int = 1) -> TaskResult:
    """Three items of 1,000-byte outputs: in 2,500-byte records, three pieces and a stub."""
    items = [ok_item(TaskItem(index=task_id * 3 + i, name=NAMES[task_id * 3 + i], data=None),
                     tensors=[{"name": "out", "dtype": "uint8", "shape": [1000],
                               "data": bytes(1000)}]) for i in range(3)]
    return TaskResult(job_id=JOB, task_id=task_id, attempt=attempt, worker="w", model=MODEL,
                      model_version=None, items=items, started_at=0, finished_at=0,
                      decode_seconds=0.0, inference_seconds=0.0)


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> tuple[MemoryBroker, Config]:
    """The results topic of a job of two tasks: the first in pieces (written twice, by two
    attempts), the second in one record."""
    config = make_config()
    broker = new_broker(config)
    chunked = [*result_records(CODEC, result(0), encode_result(CODEC, result(0)), cap=2500),
               *result_records(CODEC, result(0, 2), encode_result(CODEC, result(0, 2)),
                               cap=2500)]
    assert len(chunked) == 8
    for value in [*chunked, encode_result(CODEC, result(1))]:
        broker.produce(config.topic("results"), 0, JOB.encode(), value)

    def consumer(settings: dict[str, Any]) -> MemoryConsumer:
        return MemoryConsumer(broker, settings)

    monkeypatch.setattr(verifier, "Consumer", consumer)
    monkeypatch.setattr(committed, "Consumer", consumer)
    return broker, config


def test_the_chaos_verifier_reads_a_result_in_pieces_whole(
        broker: tuple[MemoryBroker, Config]) -> None:
    reader = verifier.ResultsReader(broker[1])
    try:
        assert reader.read_to_end(timeout_s=10, settle_s=0)
        records = reader.snapshot()
    finally:
        reader.close()
    report = verifier.verify(JOB, NAMES, records, None, reader.undecodable)
    assert report.ok, report.render()
    assert (report.records, report.items_in_records, report.lost) == (3, 9, 0)
    assert (report.duplicates, report.reissued_tasks, report.undecodable) == (0, 1, 0)


def test_the_benchmarks_reader_reads_a_result_in_pieces_whole(
        broker: tuple[MemoryBroker, Config]) -> None:
    reader = committed.CommittedResults(broker[1]).start()
    try:
        reader.read_to_end(timeout_s=10)
    finally:
        reader.stop()
    assert reader.done_items(JOB) == 6
    assert committed.audit(reader.snapshot(), JOB, NAMES) == {
        "records": 3, "duplicate_records": 0, "duplicated_tasks": 0, "duplicate_items": 3,
        "lost_items": 0, "unknown_items": 0}
