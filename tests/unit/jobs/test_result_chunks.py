"""A result in chunks read back (`keep_result` into a `ResultSpool`): it is its task's once its
TaskResult and every piece are in, whatever their order; the first result whole wins, so the
pieces a worker left without their TaskResult (it died between them, without transactions)
never make a result, and a result of the task whole before them keeps its place."""

from __future__ import annotations

from inferstream.jobs.output import keep_result
from inferstream.jobs.pieces import WholeResults
from inferstream.jobs.spool import ResultSpool
from inferstream.schemas.records import TaskItem, TaskResult, encode_result, ok_item
from inferstream.worker.oversize import result_records
from tests.unit.support.memory import CODEC, MODEL

#: Small enough that a result of three 1,000-byte outputs takes three pieces and its stub.
CAP = 2500


def result(task_id: int, attempt: int = 1, job_id: str = "j") -> TaskResult:
    items = [ok_item(TaskItem(index=task_id * 3 + i, name=f"item-{i}", data=None),
                     tensors=[{"name": "out", "dtype": "uint8", "shape": [1000],
                               "data": bytes([attempt]) * 1000}]) for i in range(3)]
    return TaskResult(job_id=job_id, task_id=task_id, attempt=attempt, worker="w", model=MODEL,
                      model_version=None, items=items, started_at=0, finished_at=0,
                      decode_seconds=0.0, inference_seconds=0.0)


def records(task: TaskResult) -> list[bytes]:
    return result_records(CODEC, task, encode_result(CODEC, task), cap=CAP)


def read_back(*values: bytes) -> list[tuple[int, int]]:
    """(task id, attempt) of each result the spool holds, in task order."""
    with ResultSpool(CODEC) as spool:
        for value in values:
            keep_result(spool, "j", value)
        return [(r["task_id"], r["attempt"]) for r in spool.in_task_order()]


def test_a_result_in_chunks_reads_back_whole_in_any_order() -> None:
    pieces = records(result(0))
    assert len(pieces) == 4 and all(len(piece) <= CAP for piece in pieces)
    with ResultSpool(CODEC) as spool:
        for value in [pieces[-1], pieces[2], pieces[0], pieces[1]]:  # the TaskResult first
            keep_result(spool, "j", value)
        (whole,) = spool.in_task_order()
    assert whole == {**result(0), "ok_count": 3, "error_count": 0, "chunks": 0,
                     "chunk_id": ""}


def test_pieces_without_their_taskresult_never_make_a_result() -> None:
    died = records(result(0, attempt=1))[:-1]  # every piece, not the TaskResult
    assert read_back(*died) == []
    assert read_back(*died, *records(result(0, attempt=2))) == [(0, 2)]
    assert read_back(*died, encode_result(CODEC, result(0, attempt=3))) == [(0, 3)]


def test_the_first_result_whole_wins() -> None:
    chunked = records(result(0, attempt=1))
    plain = encode_result(CODEC, result(0, attempt=2))
    assert read_back(plain, *chunked) == [(0, 2)]
    assert read_back(*chunked, plain) == [(0, 1)]
    # its TaskResult first but a piece late: the plain result is whole before it
    assert read_back(chunked[-1], *chunked[:2], plain, chunked[2]) == [(0, 2)]


def test_the_pieces_of_another_job_are_not_read() -> None:
    other = records(result(0, job_id="k"))
    assert read_back(*other) == []
    assert read_back(*other[:-1], *records(result(1))) == [(1, 1)]


def test_every_result_whole_keeps_each_attempt_of_every_job() -> None:
    """What the readers that count all committed results take (`WholeResults`)."""
    died = records(result(0, attempt=1))[:-1]
    values = [*died, *records(result(0, attempt=2)), encode_result(CODEC, result(0, attempt=3)),
              *records(result(1, job_id="k"))]
    every = WholeResults(CODEC)
    for value in values:
        keep_result(every, None, value)
    assert [(r["job_id"], r["task_id"], r["attempt"], len(r["items"]))
            for r in every.take()] == [("j", 0, 2, 3), ("j", 0, 3, 3), ("k", 1, 1, 3)]
    assert every.take() == []
