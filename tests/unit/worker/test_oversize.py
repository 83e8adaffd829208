"""A task whose outputs would not fit in one result record (16 MiB): the worker keeps its items
in order while they fit and makes the rest errors that say why, so the task is committed once
and its job can end, instead of every commit of its partition failing for ever."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from inferstream.models import LoadedModel
from inferstream.models.names import parse_sim_name
from inferstream.models.outputs import ItemOutput, NamedTensor, Tensors
from inferstream.models.sim import SimModel
from inferstream.schemas.records import (
    ItemStatus,
    TaskItem,
    TaskResult,
    error_item,
    ok_item,
    read_record,
)
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
