"""A task's result as the controller reads it: everything but its items, and how many of
those are OK and ERROR (`ResultSummary`).

A TaskResult's item counts are written before its items (`encode_result`), so the
controller reads a result's summary without decoding its items (`read_result_summary`),
which took most of its CPU per item: its work per result no longer grows with the task's
size (BENCHMARKS.md, "The controller reads no item, and the worker writes its items"). A
result written with another schema than the current one (before the counts were, or by a
producer of its own), or whose writer left the counts out, is read in full and its items
counted.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from inferstream.schemas.codec import Codec, load_schema
from inferstream.schemas.item_writer import ItemWriter
from inferstream.schemas.records.results import (
    ItemResult,
    ItemStatus,
    ResultSummary,
    TaskDeclined,
    TaskResult,
)
from inferstream.schemas.records.typed import decline_of

#: The leading fields of a TaskResult, which make its summary, in the schema's order.
SUMMARY_FIELDS: tuple[str, ...] = tuple(typing.get_type_hints(ResultSummary))
#: The counts among them, which a result read in full may lack.
COUNT_FIELDS = ("ok_count", "error_count")
#: The fields of a result in chunks, and their values in a result in one record.
CHUNK_DEFAULTS: dict[str, Any] = {"chunks": 0, "chunk_id": ""}


def item_counts(items: Sequence[ItemResult] | Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """How many of `items` are OK, and how many ERROR."""
    ok = sum(1 for item in items if item["status"] == ItemStatus.OK)
    return ok, len(items) - ok


def encode_result(codec: Codec, result: TaskResult) -> bytes:
    """`result` encoded with the counts of its items (whatever counts it holds): its other
    fields by `codec`, its items, the record's last field, by `item_writer`."""
    items = result["items"]
    ok, errors = item_counts(items)
    head = codec.encode("TaskResult", {**result, "ok_count": ok, "error_count": errors,
                                       "items": []})
    return head[:-1] + _item_writer().items_array(items)  # in place of the empty array


@functools.cache
def _item_writer() -> ItemWriter:
    return ItemWriter(load_schema("TaskResult"))


def encode_stub(codec: Codec, result: TaskResult, chunk_id: str, chunks: int) -> bytes:
    """The TaskResult that stands for `result` written as `chunks` ResultChunks of
    `chunk_id`: its summary, its items' counts, and no item."""
    ok, errors = item_counts(result["items"])
    return codec.encode("TaskResult", {**result, "ok_count": ok, "error_count": errors,
                                       "chunks": chunks, "chunk_id": chunk_id, "items": []})


def summary_of(result: Mapping[str, Any]) -> ResultSummary:
    """The summary of a result read in full: its fields but the items, and their counts."""
    ok, errors = item_counts(result["items"])
    fields = {name: result.get(name, CHUNK_DEFAULTS.get(name)) for name in SUMMARY_FIELDS
              if name not in COUNT_FIELDS}
    return typing.cast(ResultSummary, {**fields, "ok_count": ok, "error_count": errors})


def read_result_summary(codec: Codec, value: bytes) -> ResultSummary | TaskDeclined | None:
    """A record of the results topic as the controller reads it: a TaskResult's summary,
    without decoding its items where its writer counted them; a worker's TaskDeclined; or
    None for a ResultChunk, a piece of a large result whose own TaskResult sums it up."""
    if codec.record_name(value) == "ResultChunk":  # up to 16 MiB: not decoded
        return None
    name, record = codec.decode_leading(value, "TaskResult", SUMMARY_FIELDS)
    declined = decline_of(name, record)
    if declined is not None:
        return declined
    if "items" in record:  # an older or foreign writer's, read in full: count what it holds
        return summary_of(record)
    if record["ok_count"] >= 0 and record["error_count"] >= 0:
        return typing.cast(ResultSummary, record)
    return summary_of(codec.decode(value))
