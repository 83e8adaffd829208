"""A TaskResult as the controller reads it (`read_result_summary`): the fields before its
items, with their counts, read without the items; results written without counts (before v3,
or by a producer that left them out) are read in full and counted."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from inferstream.schemas import Codec, SchemaError, load_schema
from inferstream.schemas.codec import schema_fingerprint
from inferstream.schemas.records import (
    ItemStatus,
    TaskControl,
    TaskControlReason,
    TaskDeclined,
    TaskResult,
    encode_result,
    read_record,
    read_result_summary,
    summary_of,
)
from inferstream.schemas.records.summary import SUMMARY_FIELDS
from tests.unit.examples import EXAMPLES

GOLDEN = Path(__file__).parent / "golden"
CODEC = Codec()


def example(oks: int, errors: int) -> TaskResult:
    """The example result with `oks` OK items and then `errors` failed ones, uncounted."""
    record: dict[str, Any] = copy.deepcopy(EXAMPLES["TaskResult"])
    ok, failed = record["items"]
    record["items"] = [{**ok, "index": i} for i in range(oks)] + [
        {**failed, "index": oks + i} for i in range(errors)]
    del record["ok_count"], record["error_count"]
    return TaskResult(**record)


def test_the_summary_fields_are_what_the_schema_writes_before_the_items() -> None:
    names = [field["name"] for field in load_schema("TaskResult")["fields"]]
    assert tuple(names) == (*SUMMARY_FIELDS, "items")


@pytest.mark.parametrize(("oks", "errors"), [(0, 0), (3, 0), (0, 2), (70, 65)])
def test_encode_result_counts_the_items_and_the_summary_reads_them(oks: int,
                                                                   errors: int) -> None:
    result = example(oks, errors)
    encoded = encode_result(CODEC, {**result, "ok_count": 99, "error_count": 0})  # not trusted
    summary = read_result_summary(CODEC, encoded)
    assert summary == summary_of(result)
    assert (summary["ok_count"], summary["error_count"]) == (oks, errors)
    assert "items" not in summary
    back = read_record(CODEC, encoded, TaskResult)  # a full read has them too
    assert (back["ok_count"], back["error_count"]) == (oks, errors)
    assert [item["status"] for item in back["items"]] == (
        [ItemStatus.OK] * oks + [ItemStatus.ERROR] * errors)


def test_the_summary_does_not_decode_the_items() -> None:
    """Everything after the counts cut off: a full read fails, the summary still reads."""
    result = example(40, 2)
    encoded = encode_result(CODEC, result)
    cut = encoded[: len(encode_result(CODEC, example(0, 0))) - 1]  # before the items' count
    with pytest.raises(SchemaError):
        CODEC.decode(cut)
    assert read_result_summary(CODEC, cut) == summary_of(result)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_result_written_before_the_counts_is_counted_from_its_items(version: str) -> None:
    old = (GOLDEN / f"TaskResult.{version}.bin").read_bytes()
    summary = read_result_summary(CODEC, old)
    assert (summary["ok_count"], summary["error_count"]) == (1, 1)
    assert summary["job_id"] == EXAMPLES["TaskResult"]["job_id"]
    assert summary["inference_seconds"] == EXAMPLES["TaskResult"]["inference_seconds"]


def test_a_current_result_written_without_counts_is_read_in_full_and_counted() -> None:
    result = example(5, 4)
    uncounted = CODEC.encode("TaskResult", result)  # the counts at their default, -1
    assert CODEC.decode(uncounted)["ok_count"] == -1
    assert read_result_summary(CODEC, uncounted) == summary_of(result)


def test_a_foreign_writer_with_the_same_leading_names_is_read_in_full_and_resolved() -> None:
    """A writer schema whose counts may be null (a producer of its own, learned by the codec):
    its leading fields are not read as the current schema's; the full read resolves them (a
    null count where the current schema has an int is a SchemaError: a dead letter), and its
    items are counted."""
    schema = load_schema("TaskResult")
    for field in schema["fields"]:
        if field["name"] in ("ok_count", "error_count"):
            field.update(type=["null", "int"], default=None)
    codec = Codec()
    codec.add_writer_schema(schema)
    header = b"\xc3\x01" + schema_fingerprint(parse_schema(schema))

    def written(ok: int | None) -> bytes:
        body = io.BytesIO()
        schemaless_writer(body, parse_schema(schema), {**example(2, 1), "ok_count": ok,
                                                        "error_count": ok})
        return header + body.getvalue()
    with pytest.raises(SchemaError):
        read_result_summary(codec, written(None))
    assert read_result_summary(codec, written(7)) == summary_of(example(2, 1))


def test_a_decline_reads_whole_and_another_record_is_a_schema_error() -> None:
    declined = TaskDeclined(**EXAMPLES["TaskDeclined"])
    assert read_result_summary(CODEC, CODEC.encode("TaskDeclined", declined)) == declined
    control = TaskControl(job_id="j1", task_id=-1, attempt=0,
                          reason=TaskControlReason.CANCELLED, at=1)
    with pytest.raises(SchemaError, match="TaskResult or TaskDeclined"):
        read_result_summary(CODEC, CODEC.encode("TaskControl", control))


def test_a_piece_of_a_large_result_is_skipped_by_its_header_alone() -> None:
    """A ResultChunk (up to 16 MiB) is nothing to count: the controller reads its name from
    the record's header and not its data (cut off here: it could not be decoded)."""
    piece = CODEC.encode("ResultChunk", EXAMPLES["ResultChunk"])
    assert read_result_summary(CODEC, piece) is None
    assert read_result_summary(CODEC, piece[:12]) is None
