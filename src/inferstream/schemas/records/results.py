"""What a worker answers a task with: a TaskResult (one ItemResult per item), or a
TaskDeclined when it does not serve the task's model.

An item's output sits in the fields of its model's output kind (`OutputFields`): `top_k`
(classification), `embedding` or `tensors`; the others stay empty.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, NotRequired, TypedDict

from inferstream.schemas.records.jobs import TaskItem


class ItemStatus(StrEnum):
    OK = "OK"
    ERROR = "ERROR"


class Prediction(TypedDict):
    class_id: int
    label: str
    score: float


class NamedTensor(TypedDict):
    """One named output of one item: `data` holds its values, C order, little-endian, of
    numpy `dtype` and `shape`."""

    name: str
    dtype: str
    shape: list[int]
    data: bytes


class OutputFields(TypedDict):
    """The fields of an ItemResult (and a StreamResult) that hold an item's output."""

    top_k: list[Prediction]
    embedding: list[float] | None
    tensors: list[NamedTensor]


class ItemResult(TypedDict):
    index: int
    name: str
    status: ItemStatus
    top_k: list[Prediction]
    embedding: list[float] | None
    tensors: list[NamedTensor]
    error: str | None


class _ResultHead(TypedDict):
    """The fields a TaskResult begins with, before its item counts and its items."""

    job_id: str
    task_id: int
    attempt: int
    worker: str
    model: str
    model_version: str | None
    started_at: int
    finished_at: int
    decode_seconds: float
    inference_seconds: float


class TaskResult(_ResultHead):
    """One task attempt's outcome. `ok_count` and `error_count` are written by
    `summary.encode_result`, from the items (-1, their default, where a writer left them
    out)."""

    ok_count: NotRequired[int]
    error_count: NotRequired[int]
    chunks: NotRequired[int]
    chunk_id: NotRequired[str]
    items: list[ItemResult]


class ResultSummary(_ResultHead):
    """A TaskResult without its items, which the controller reads in their place: how many
    are OK and how many ERROR, and the ResultChunks that hold them where they did not fit
    in one record (`chunks` 0: none)."""

    ok_count: int
    error_count: int
    chunks: int
    chunk_id: str


class ResultChunk(TypedDict):
    """A piece of a TaskResult's encoding too large for one record (`worker.oversize`)."""

    job_id: str
    task_id: int
    chunk_id: str
    index: int
    data: bytes


class TaskDeclined(TypedDict):
    job_id: str
    task_id: int
    attempt: int
    worker: str
    model: str
    served_models: list[str]
    reason: str
    task: bytes
    declined_at: int


def ok_item(item: TaskItem, top_k: list[Prediction] | None = None, *,
            embedding: list[float] | None = None,
            tensors: list[NamedTensor] | None = None) -> ItemResult:
    """An item's output, in the fields of its model's output kind: the `top_k` of a
    classification, an `embedding` or `tensors`."""
    # dict displays, here and below: half the time of an ItemResult(...) call, once an item
    return {"index": item["index"], "name": item["name"], "status": ItemStatus.OK,
            "top_k": top_k or [], "embedding": embedding, "tensors": tensors or [],
            "error": None}


def error_item(item: TaskItem, reason: str) -> ItemResult:
    """An item's failure, for `reason` in one line (`single_line`): every output format, CSV
    and JSON lines included, keeps one line an item. Surrogates in it (a path that is not
    UTF-8, which a worker opens from its `file://` URI, `models.items.file_uri_path`) are
    escaped: Avro's strings hold none, and a result that could not be encoded left its task
    unanswered and stopped the worker's batch loop of the model."""
    if reason.splitlines() != [reason]:
        reason = single_line(reason)
    reason = encodable(reason)
    return {"index": item["index"], "name": item["name"], "status": ItemStatus.ERROR,
            "top_k": [], "embedding": None, "tensors": [], "error": reason}


def encodable(text: str) -> str:
    """`text` with its surrogates (a path that is not UTF-8, as Python decodes it) escaped,
    `\\udce9`: Avro's strings hold none, and a record holding one could not be encoded."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def single_line(text: str) -> str:
    """`text` without line breaks: its non-blank lines, stripped, joined by " | "."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


#: The most bytes of reasons that `error_items` repeats over a task's items: beyond that the
#: first item holds the reason in full and the others a short pointer to it, so a result
#: whose every item failed fits in one record whatever the reason's length.
REPEATED_REASON_BYTES = 1024 * 1024
#: How much of a long reason the items after the first keep.
SHORT_REASON_CHARS = 24


def short_reason(reason: str) -> str:
    """What the items after the first say of a long `reason` (of the same length whichever
    item holds it in full); `reason` itself where that is not shorter."""
    short = f"{reason[:SHORT_REASON_CHARS].rstrip()}... (in full in the first error)"
    return short if len(short) < len(reason) else reason


def error_items(items: Sequence[TaskItem], reason: str,
                repeat_bytes: int = REPEATED_REASON_BYTES) -> list[ItemResult]:
    """Every item of `items` an error with `reason`; where that would repeat more than
    `repeat_bytes` of it, the first holds it in full and the others `short_reason`."""
    if not items or len(items) * len(reason.encode()) <= repeat_bytes:
        return [error_item(item, reason) for item in items]
    short = short_reason(reason)
    return [error_item(items[0], reason), *(error_item(item, short) for item in items[1:])]


def output_json(output: OutputFields) -> dict[str, Any]:
    """An item's output as JSON output shows it: `top_k` always; `embedding` and `tensors`
    (each tensor's data in base64) only where the item has them."""
    shown: dict[str, Any] = {"top_k": output["top_k"]}
    if output["embedding"] is not None:
        shown["embedding"] = output["embedding"]
    if output["tensors"]:
        shown["tensors"] = [{"name": t["name"], "dtype": t["dtype"], "shape": t["shape"],
                             "data": base64.b64encode(t["data"]).decode("ascii")}
                            for t in output["tensors"]]
    return shown
