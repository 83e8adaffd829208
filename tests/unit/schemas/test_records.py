"""The typed records of `schemas/records/` agree with the `.avsc` files they stand for, and
the typed read gives each field its type."""

from __future__ import annotations

import json
import types
import typing
from enum import StrEnum
from typing import Any

import pytest

from inferstream.schemas import SCHEMA_NAMES, Codec, SchemaError, load_schema
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
        "TaskControlReason": rec.TaskControlReason, "WorkerState": rec.WorkerState,
    }
    assert set(ours) == set(enums)
    for name, enum in ours.items():
        assert [m.value for m in enum] == enums[name], name


def test_records_built_here_encode_and_read_back_typed() -> None:
    codec = Codec()
    job = rec.Job(job_id="j1", model="sim:ms=1", model_version=None, pool="default", top_k=2,
                  chunk_size=4, inputs=["/x.jpg"], inline_items=[], submitted_at=rec.now_ms(),
                  submitter="", output_path=None)
    item = rec.TaskItem(index=0, name="/x.jpg", data=None)
    task = rec.new_task(job, 3, [item])
    assert rec.read_record(codec, codec.encode("Task", task), rec.Task) == task
    result = rec.TaskResult(
        job_id="j1", task_id=3, attempt=1, worker="w", model="sim:ms=1",
        items=[rec.ok_item(item, [rec.Prediction(class_id=1, label="a", score=0.5)])],
        started_at=1, finished_at=2, decode_seconds=0.0, inference_seconds=0.0)
    back = rec.read_record(codec, codec.encode("TaskResult", result), rec.TaskResult)
    assert back["items"][0]["status"] is rec.ItemStatus.OK
    assert rec.read_result(codec, codec.encode("TaskResult", result)) == back
    entry = rec.new_ledger_entry("j1", -1, rec.LedgerKind.JOB, rec.LedgerStatus.ACTIVE)
    read = rec.read_record(codec, codec.encode("LedgerEntry", entry), rec.LedgerEntry)
    assert read["status"] is rec.LedgerStatus.ACTIVE and read["kind"] is rec.LedgerKind.JOB


def test_a_record_of_another_kind_is_a_schema_error() -> None:
    codec = Codec()
    control = rec.TaskControl(job_id="j1", task_id=-1, attempt=0,
                              reason=rec.TaskControlReason.CANCELLED, at=1)
    with pytest.raises(SchemaError, match="expected a Task record, got a TaskControl"):
        rec.read_record(codec, codec.encode("TaskControl", control), rec.Task)
    with pytest.raises(SchemaError, match="TaskResult or TaskDeclined"):
        rec.read_result(codec, codec.encode("TaskControl", control))


def pool_entry(*ranges: rec.ModelRange) -> rec.PolicyEntry:
    return rec.PolicyEntry(
        worker="", pool="mixed", model=None, capacity_items_per_s=90.0, weight=1.0,
        strategy="throughput", updated_at=1, kind=rec.PolicyKind.POOL, share=1.0,
        health=rec.WorkerHealth.HEALTHY, batch_size=None, task_size=12,
        models=[r.model for r in ranges], model_partitions=list(ranges), model_rates=[])


def test_a_policy_entry_carries_model_ranges_and_writes_them_as_model_partitions() -> None:
    codec = Codec()
    entry = pool_entry(rec.ModelRange("efficientnet_lite0", 0, 3), rec.ModelRange("sim:ms=2", 3, 9))
    value = codec.encode("PolicyEntry", rec.plain_record(rec.PolicyEntry, entry))
    assert codec.decode(value)["model_partitions"] == [
        {"model": "efficientnet_lite0", "first": 0, "count": 3},
        {"model": "sim:ms=2", "first": 3, "count": 9}]
    back = rec.read_record(codec, value, rec.PolicyEntry)
    assert back == entry and 5 in back["model_partitions"][1]
    assert back["kind"] is rec.PolicyKind.POOL and back["health"] is rec.WorkerHealth.HEALTHY
    assert entry["model_partitions"][0] == rec.ModelRange("efficientnet_lite0", 0, 3)  # unchanged


def test_a_json_record_reads_typed_and_a_symbol_outside_its_enum_is_refused() -> None:
    plain = json.loads(json.dumps(rec.plain_record(rec.PolicyEntry,
                                                   pool_entry(rec.ModelRange("a", 0, 2)))))
    assert rec.as_record(rec.PolicyEntry, plain) == pool_entry(rec.ModelRange("a", 0, 2))
    with pytest.raises(ValueError, match="SLEEPY"):
        rec.as_record(rec.PolicyEntry, {**plain, "health": "SLEEPY"})


def test_a_sample_is_its_publisher_fields_and_one_group_per_kind_of_reading() -> None:
    groups = [rec.PublisherFields, rec.CpuFields, rec.MemoryFields, rec.AcceleratorFields,
              rec.PerformanceFields, rec.QueueFields, rec.SoftwareFields, rec.ExtraFields]
    fields = [name for group in groups for name in typing.get_type_hints(group)]
    assert sorted(fields) == sorted(typing.get_type_hints(rec.SysInfoSample))


def test_an_item_error_naming_a_path_that_is_not_utf8_is_written() -> None:
    """A job may name a file whose name is not UTF-8 by its file:// URI (`item_name`); a
    worker opens it as a path with surrogates, and the reason of its error (a missing file)
    names that path. Avro's strings hold no surrogate: the task's result could not be
    encoded, which killed the worker's batch loop of the model and held the task's partition
    for ever. The reason keeps the path with the surrogates escaped."""
    codec = Codec(None)
    path = "/data/caf\udce9.jpg"  # caf<0xE9>.jpg, Latin-1, as os.fsdecode reads it
    item = rec.TaskItem(index=0, name="file:///data/caf%E9.jpg", data=None)
    result = rec.TaskResult(
        job_id="j", task_id=0, attempt=1, worker="w", model="m", model_version=None,
        items=[rec.error_item(item, f"missing file: {path}")], started_at=0, finished_at=0,
        decode_seconds=0.0, inference_seconds=0.0)
    (written,) = rec.read_record(codec, rec.encode_result(codec, result), rec.TaskResult)["items"]
    assert written["error"] == "missing file: /data/caf\\udce9.jpg"


def test_a_decline_whose_reason_names_a_path_that_is_not_utf8_is_written() -> None:
    """A worker declines a task whose model could not load with the load's error, which may
    name a path that is not UTF-8 (a repository on such a folder): its surrogates escaped, as
    an item's error's are, the decline is encoded where it could not be."""
    from inferstream.config import Config
    from inferstream.serving.source import WorkerContext
    from inferstream.worker.source import TaskSource
    from tests.unit.support.memory import CODEC

    source = TaskSource(Config(), CODEC)
    served = type("Served", (), {"references": ["sim:ms=0"]})()
    hooks = type("Hooks", (), {"after_decline": lambda self, model: None})()
    source._worker = WorkerContext("w", hooks, served, {"inferstream.results": 1})
    task = rec.Task(job_id="j", task_id=0, attempt=1, pool="default", model="m",
                    model_version=None, top_k=1, items=[], issued_at=0, deadline_ms=None,
                    home_partition=None)
    outgoing = source._declined(task, "cannot load m: no file /models/caf\udce9/1")
    declined = rec.read_record(CODEC, outgoing.value, rec.TaskDeclined)
    assert declined["reason"] == "worker w cannot load m: no file /models/caf\\udce9/1"
