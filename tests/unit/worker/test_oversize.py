"""A task whose outputs would not fit in one result record (16 MiB): the worker keeps its items
in order while they fit and makes the rest errors that say why, so the task is committed once
and its job can end, instead of every commit of its partition failing for ever."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

from inferstream.config.controller import MAX_CHUNK_SIZE
from inferstream.controller.declines import failed_result
from inferstream.controller.expansion import TASK_BYTES_CAP
from inferstream.models import LoadedModel
from inferstream.models.names import parse_sim_name
from inferstream.models.outputs import ItemOutput, NamedTensor, Tensors
from inferstream.models.sim import SimModel
from inferstream.schemas.records import (
    ItemResult,
    ItemStatus,
    Task,
    TaskItem,
    TaskResult,
    error_item,
    error_items,
    ok_item,
    read_record,
)
from inferstream.schemas.records.results import short_reason
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker
from inferstream.worker.oversize import RESULT_BYTES_CAP, fitted
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.records import all_committed, put_tasks, results, task_counts
from tests.unit.support.running import Running

MiB = 2**20
#: One item's "mask": four of them (a task) are 20 MiB, three fit in a record.
MASK = 5 * MiB


class MaskModel(SimModel):
    """The sim model, answering each item with a 5 MiB uint8 tensor, as a segmentation model
    answers a large photo."""

    def predict(self, batch: torch.Tensor, top_k: int) -> Sequence[ItemOutput]:
        hashes = [int(h) for h in batch.reshape(len(batch), -1)[:, 0].tolist()]
        return [Tensors((NamedTensor("mask", "uint8", (MASK,), bytes([h % 251]) * MASK),))
                for h in hashes]


def test_outputs_past_a_record_are_errors_that_say_why_and_each_task_ends(
        broker: MemoryBroker, make_worker: Callable[..., Worker], running: Running) -> None:
    config = make_config()
    put_tasks(broker, config, 2, items=4)
    model: LoadedModel = MaskModel(MODEL, parse_sim_name(MODEL))
    running.workers(make_worker(config, model))
    running.until(all_committed(broker, config))

    found = results(broker, config)
    assert task_counts(found) == {0: 1, 1: 1}
    for result in found:
        items = result["items"]
        assert [i["status"] for i in items] == [ItemStatus.OK] * 3 + [ItemStatus.ERROR]
        assert [len(i["tensors"][0]["data"]) for i in items[:3]] == [MASK] * 3
        assert items[3]["error"] == (
            "output too large: this task's outputs take 20.0 MiB, over the 15.9 MiB a result "
            "record holds; submit the job with --chunk-size 3 or less")
    assert max(map(len, broker.values(config.topic("results")))) <= RESULT_BYTES_CAP


def result_of(*outputs: bytes) -> TaskResult:
    items = [ok_item(TaskItem(index=i, name=f"item-{i}", data=None),
                     tensors=[{"name": "out", "dtype": "uint8", "shape": [len(data)],
                               "data": data}])
             for i, data in enumerate(outputs)]
    items.insert(1, error_item(TaskItem(index=9, name="bad", data=None), "cannot decode"))
    return TaskResult(job_id="j", task_id=0, attempt=1, worker="w", model=MODEL,
                      model_version=None, items=items, started_at=0, finished_at=0,
                      decode_seconds=0.0, inference_seconds=0.0)


def test_a_result_that_fits_is_sent_as_it_is_and_one_too_large_item_is_said_so() -> None:
    small = result_of(b"a" * 100, b"b" * 100)
    encoded = CODEC.encode("TaskResult", small)
    assert fitted(CODEC, small, encoded, cap=len(encoded)) is encoded

    large = result_of(b"a" * 1000, b"b" * 5000, b"c" * 100)
    encoded = CODEC.encode("TaskResult", large)
    kept = read_record(CODEC, fitted(CODEC, large, encoded, cap=3000), TaskResult)
    # the first item and the error before it kept, the 5,000-byte one and all after made errors
    assert [(i["index"], i["status"]) for i in kept["items"]] == [
        (0, ItemStatus.OK), (9, ItemStatus.ERROR), (1, ItemStatus.ERROR), (2, ItemStatus.ERROR)]
    assert kept["items"][1]["error"] == "cannot decode"
    assert kept["items"][2]["error"].startswith(
        "output too large: one item's output takes 4.9 KiB, over the 2.9 KiB a result record "
        "holds")


@pytest.mark.parametrize("cap", [30_000, 31_000, 33_000, 36_000, 40_000])
def test_errors_that_would_not_fit_with_their_reason_each_point_to_the_first(cap: int) -> None:
    """Outputs too large for a record and so many items that the reason on each of them would
    not fit either (401 errors take 90 KB with it, 29.2 KB without): the first error holds it
    in full, the others a short pointer to it, and the record fits the cap, whatever it is."""
    large = result_of(*[b"x" * 200] * 400)
    encoded = CODEC.encode("TaskResult", large)
    kept = read_record(CODEC, fitted(CODEC, large, encoded, cap=cap), TaskResult)
    assert len(CODEC.encode("TaskResult", kept)) <= cap
    items = kept["items"]
    assert [i["index"] for i in items] == [0, 9, *range(1, 400)]
    first = next(n for n, i in enumerate(items) if i["status"] == ItemStatus.ERROR
                 and i["error"] != "cannot decode")
    assert all(i["status"] == ItemStatus.OK for i in items[:first] if i["index"] != 9)
    reason = items[first]["error"]
    assert reason.startswith("output too large: this task's outputs take")
    assert all(i["status"] == ItemStatus.ERROR for i in items[first:])
    assert {i["error"] for i in items[first + 1:]} == {short_reason(reason)}
    assert short_reason(reason) == "output too large: this t... (in full in the first error)"


def test_a_task_of_max_chunk_size_items_fails_in_one_record() -> None:
    """The controller fails a task's items in one TaskResult (no worker will run it): the
    reason in full on the first item and a pointer to it on the others, so that with
    `max_chunk_size`'s ceiling of items and names that fill a task's 8 MiB the record still
    fits where a result goes (each item adds the same bytes: one pair measures it)."""
    items = [TaskItem(index=i, name=f"item-{i}", data=None) for i in range(10_000)]
    task = Task(job_id="20261206-000000-00000000", task_id=0, attempt=4, pool="default",
                model=MODEL, model_version=None, top_k=5, items=items, issued_at=0,
                deadline_ms=None, home_partition=None)
    reason = "no live worker of pool 'default' serves model 'x': " + "w-1 serves 'y', " * 10
    errors = failed_result(task, reason)["items"]
    assert errors[0]["error"] == reason
    assert {e["error"] for e in errors[1:]} == {
        "no live worker of pool '... (in full in the first error)"}

    name = "n" * (TASK_BYTES_CAP // MAX_CHUNK_SIZE)
    worst = TaskItem(index=10**10, name=name, data=None)  # item indexes are the job's
    full, short = error_items([worst, worst], reason, repeat_bytes=0)
    around = failed_result(task, reason)  # the record's fields around its items

    def size(items: list[ItemResult]) -> int:
        return len(CODEC.encode("TaskResult", TaskResult(**{**around, "items": items})))
    each = size([full, short]) - size([full])
    assert size([full]) + (MAX_CHUNK_SIZE - 1) * each <= RESULT_BYTES_CAP
