"""A task whose outputs would not fit in one result record (16 MiB): the worker sends the
result in ResultChunks and a TaskResult that names them, in the task's transaction; the
controller counts that TaskResult and skips the chunks, the readers put them together, and
the job's output holds every item's output. A result past `MAX_CHUNKS` records keeps its items
in order while they fit and makes the rest errors that say why."""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Sequence

import pytest
import torch

from inferstream.client import Client
from inferstream.config.controller import MAX_CHUNK_SIZE
from inferstream.controller.declines import failed_result
from inferstream.controller.expansion import TASK_BYTES_CAP
from inferstream.controller.replica import Controller
from inferstream.jobs.output import keep_result
from inferstream.jobs.spool import ResultSpool
from inferstream.kafka.clients import Outgoing, Record
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
    encode_result,
    error_item,
    error_items,
    ok_item,
    read_record,
    read_result_summary,
)
from inferstream.schemas.records.results import short_reason
from inferstream.serving.loop import Worker
from inferstream.serving.pipeline import TaskRun
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.worker import oversize
from inferstream.worker import source as worker_source
from inferstream.worker.oversize import RESULT_BYTES_CAP, fitted, result_records
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.records import settled
from tests.unit.support.running import Running

MiB = 2**20
#: One item's "mask": four of them (a task) are 20 MiB, three fit in a record.
MASK = 5 * MiB
#: A record's cap in the test of chunks, and a mask there: a task of four takes two chunks.
CAP, SMALL_MASK = 64 * 1024, 20 * 1024


class MaskModel(SimModel):
    """The sim model, answering each item with a `size` uint8 tensor (5 MiB), as a
    segmentation model answers a large photo: its bytes are the item's number (the sim's
    input holds it)."""

    size = MASK

    def predict(self, batch: torch.Tensor, top_k: int) -> Sequence[ItemOutput]:
        hashes = [int(h) for h in batch.reshape(len(batch), -1)[:, 0].tolist()]
        return [Tensors((NamedTensor("mask", "uint8", (self.size,),
                                     bytes([h % 251]) * self.size),)) for h in hashes]


def test_a_result_past_a_record_goes_in_chunks_and_the_output_holds_every_item(
        broker: MemoryBroker, clients: MemoryKafkaClients, make_worker: Callable[..., Worker],
        running: Running, make_controller: Callable[..., Controller],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Records of 64 KiB and masks of 20 KiB: a task of four takes two chunks (16 MiB and
    5 MiB masks as a real worker's cap would make the test's data 40 MiB)."""
    monkeypatch.setattr(oversize, "RESULT_BYTES_CAP", CAP)
    monkeypatch.setattr(MaskModel, "size", SMALL_MASK)
    # a result of 16 KiB of outputs or more is encoded on a thread (`render_on_thread`)
    monkeypatch.setattr(worker_source, "RENDER_ON_THREAD_BYTES", 16 * 1024)
    rendered_on: list[str] = []
    render = worker_source.TaskSource.render

    def recorded(self: worker_source.TaskSource, run: TaskRun, record: Record) -> list[Outgoing]:
        rendered_on.append(threading.current_thread().name)
        return render(self, run, record)

    monkeypatch.setattr(worker_source.TaskSource, "render", recorded)
    config = make_config()
    job = Client(config, CODEC, clients).submit(
        MODEL, [f"item-{i}" for i in range(8)], chunk_size=4)
    model: LoadedModel = MaskModel(MODEL, parse_sim_name(MODEL))
    running.workers(make_worker(config, model))
    running.controller(make_controller())
    running.until(settled(broker, config))

    status = job.wait(timeout_s=5)
    assert (status.ok_items, status.error_items) == (8, 0)
    lines = list(job.results())
    assert [line["status"] for line in lines] == ["ok"] * 8
    assert sorted(line["item"].rsplit("/", 1)[-1] for line in lines) == [
        f"item-{i}" for i in range(8)]
    masks = [base64.b64decode(line["tensors"][0]["data"]) for line in lines]
    assert all(mask == mask[:1] * SMALL_MASK for mask in masks)  # whole, each one item's
    values = broker.values(config.topic("results"))
    assert max(map(len, values)) <= CAP
    summaries = [read_result_summary(CODEC, value) for value in values]
    # each task: two chunks (20 MiB), then its TaskResult with the counts and no item
    assert [s is None for s in summaries].count(True) == 4
    stubs = [s for s in summaries if s is not None]
    assert [(s["chunks"], s["ok_count"]) for s in stubs] == [(2, 4), (2, 4)]
    assert broker.values(config.topic("dlq")) == []
    # off the worker's loop, whose heartbeats a 254 MiB result held for 13 s
    assert len(rendered_on) == 2 and all(name.startswith("asyncio_") for name in rendered_on)


def test_a_result_past_its_chunks_keeps_its_first_items_and_says_why() -> None:
    result = result_of(*[bytes([n]) * 1000 for n in range(10)])
    records = result_records(CODEC, result, encode_result(CODEC, result), cap=3000, chunks=2)
    assert len(records) == 3 and all(len(record) <= 3000 for record in records)
    kept = whole(records)
    # the outputs of items 0 and 1 (the error of item 9 between them) kept, the rest errors
    assert [(i["index"], i["status"]) for i in kept["items"][:4]] == [
        (0, ItemStatus.OK), (9, ItemStatus.ERROR), (1, ItemStatus.OK), (2, ItemStatus.ERROR)]
    assert kept["items"][1]["error"] == "cannot decode"
    assert {i["error"] for i in kept["items"][3:]} == {
        "output too large: this task's outputs take 10.1 KiB, over the 3.9 KiB a task's "
        "result takes in all; submit the job with --chunk-size 3 or less"}


def whole(records: list[bytes], job_id: str = "j") -> TaskResult:
    """The result that `records` carry, as a reader of the job's output puts it together."""
    with ResultSpool(CODEC) as spool:
        for record in records:
            keep_result(spool, job_id, record)
        (result,) = spool.in_task_order()
        return result


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
    assert fitted(CODEC, small, encoded, cap=len(encoded)) == (small, encoded)
    assert result_records(CODEC, small, encoded, cap=len(encoded)) == [encoded]

    large = result_of(b"a" * 1000, b"b" * 5000, b"c" * 100)
    encoded = CODEC.encode("TaskResult", large)
    kept = read_record(CODEC, fitted(CODEC, large, encoded, cap=3000)[1], TaskResult)
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
    kept = read_record(CODEC, fitted(CODEC, large, encoded, cap=cap)[1], TaskResult)
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
