"""The typed records of `schemas/records.py` agree with the `.avsc` files they stand for."""

from __future__ import annotations

import types
import typing
from enum import StrEnum
from typing import Any

import pytest

from inferstream.schemas import SCHEMA_NAMES, Codec, load_schema
from inferstream.schemas import records as rec


def _avro_records(schema: Any, found: dict[str, dict[str, Any]]) -> None:
    """Every named record in `schema` (nested ones too), by name."""
    if isinstance(schema, list):
        for branch in schema:
            _avro_records(branch, found)
    elif isinstance(schema, dict):
        if schema.get("type") == "record":
            found[schema["name"]] = schema
            for f in schema["fields"]:
                _avro_records(f["type"], found)
        elif schema.get("type") == "array":
            _avro_records(schema["items"], found)
        elif schema.get("type") == "map":
            _avro_records(schema["values"], found)


def _all_avro_records() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for name in SCHEMA_NAMES:
        _avro_records(load_schema(name), found)
    return found


def _nullable_avro(field_type: Any) -> bool:
    return isinstance(field_type, list) and "null" in field_type


def _nullable_hint(hint: Any) -> bool:
    return isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)


def _avro_enums() -> dict[str, list[str]]:
    enums: dict[str, list[str]] = {}

    def walk(schema: Any) -> None:
        if isinstance(schema, list):
            for branch in schema:
                walk(branch)
        elif isinstance(schema, dict):
            if schema.get("type") == "enum":
                enums[schema["name"]] = schema["symbols"]
            for key in ("fields", "items", "values"):
                value = schema.get(key)
                if isinstance(value, list):
                    for f in value:
                        walk(f["type"])
                elif value is not None:
                    walk(value)

    for name in SCHEMA_NAMES:
        walk(load_schema(name))
    return enums


def test_every_avro_record_has_a_type_and_no_type_is_extra() -> None:
    assert set(rec.RECORD_TYPES) == set(_all_avro_records())


@pytest.mark.parametrize("name", sorted(_all_avro_records()))
def test_a_record_type_has_the_fields_and_nullability_of_its_schema(name: str) -> None:
    schema = _all_avro_records()[name]
    hints = typing.get_type_hints(rec.RECORD_TYPES[name])
    avro_fields = {f["name"]: f["type"] for f in schema["fields"]}
    assert set(hints) == set(avro_fields), f"{name}: field names differ"
    for field, avro_type in avro_fields.items():
        assert _nullable_hint(hints[field]) == _nullable_avro(avro_type), (
            f"{name}.{field}: nullable in one, not in the other")


def test_the_status_enums_have_the_symbols_of_their_schemas() -> None:
    enums = _avro_enums()
    ours: dict[str, type[StrEnum]] = {
        "ItemStatus": rec.ItemStatus, "JobEventType": rec.JobEventType,
        "LedgerKind": rec.LedgerKind, "LedgerStatus": rec.LedgerStatus,
        "PolicyKind": rec.PolicyKind, "WorkerHealth": rec.WorkerHealth,
        "TaskControlReason": rec.TaskControlReason,
    }
    assert set(ours) == set(enums)
    for name, enum in ours.items():
        assert [m.value for m in enum] == enums[name], name


def test_records_built_here_encode_and_read_back_typed() -> None:
    codec = Codec()
    job = rec.Job(job_id="j1", model="sim:ms=1", pool="default", top_k=2, chunk_size=4,
                  inputs=["/x.jpg"], inline_items=[], submitted_at=rec.now_ms(), submitter="",
                  output_path=None)
    item = rec.TaskItem(index=0, name="/x.jpg", data=None)
    task = rec.new_task(job, 3, [item])
    assert rec.read_task(codec, codec.encode("Task", task)) == task
    result = rec.TaskResult(
        job_id="j1", task_id=3, attempt=1, worker="w", model="sim:ms=1",
        items=[rec.ok_item(item, [rec.Prediction(class_id=1, label="a", score=0.5)])],
        started_at=1, finished_at=2, decode_seconds=0.0, inference_seconds=0.0)
    back = rec.read_task_result(codec, codec.encode("TaskResult", result))
    assert back["items"][0]["status"] is rec.ItemStatus.OK
    entry = rec.new_ledger_entry("j1", -1, rec.LedgerKind.JOB, rec.LedgerStatus.ACTIVE)
    read = rec.read_ledger_entry(codec, codec.encode("LedgerEntry", entry))
    assert read["status"] is rec.LedgerStatus.ACTIVE and read["kind"] is rec.LedgerKind.JOB
