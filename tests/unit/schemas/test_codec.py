"""The Avro codec: golden bytes, single-object header, schema evolution, bad bytes.

Golden files pin the wire bytes of one example record per schema. After an intended wire
change, regenerate them and review the diff:

    INFERSTREAM_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/unit/schemas/test_codec.py
"""

from __future__ import annotations

import datetime
import io
import json
import os
import random
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from inferstream.schemas import SCHEMA_NAMES, Codec, SchemaError, load_schema
from tests.unit.examples import EXAMPLES, T0

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec()


def crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO as the Avro specification writes it out (Schema Fingerprints)."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def test_examples_cover_every_schema() -> None:
    assert set(EXAMPLES) == set(SCHEMA_NAMES)
    shipped = {p.name[: -len(".avsc")] for p in resources.files("inferstream.schemas").iterdir()}
    assert set(SCHEMA_NAMES) <= shipped


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_golden_bytes_round_trip(codec: Codec, name: str) -> None:
    record = EXAMPLES[name]
    encoded = codec.encode(name, record)
    golden = GOLDEN / f"{name}.bin"
    if os.environ.get("INFERSTREAM_REGEN_GOLDEN") == "1":
        golden.write_bytes(encoded)
    assert encoded == golden.read_bytes()
    assert codec.decode(golden.read_bytes()) == record
    assert codec.decode(encoded, expected=name) == record
    assert codec.decode_named(encoded) == (name, record)


V2_DEFAULTS = {
    "SysInfoSample": {"interval_s": 2.0, "host_cpu_percent": None,
                      "host_memory_available_bytes": None, "accelerator": None,
                      "gpu_memory_total_bytes": None, "latency_seconds_p95": None,
                      "consumer_lag": None, "served_models": [], "models": [],
                      "calibration": None, "software": {}, "calibrations": []},
    "PolicyEntry": {"kind": "WORKER", "share": 0.0, "health": "HEALTHY", "batch_size": None,
                    "task_size": None, "models": [], "model_partitions": [],
                    "model_rates": []},
}


@pytest.mark.parametrize("name", sorted(V2_DEFAULTS))
def test_a_v1_sample_and_policy_entry_read_with_the_new_fields_at_their_defaults(
        codec: Codec, name: str) -> None:
    """Samples and policy entries written before v2 (tests/unit/schemas/golden/<Name>.v1.bin) still
    read, as the current record with every added field at its default."""
    old = codec.decode((GOLDEN / f"{name}.v1.bin").read_bytes(), expected=name)
    current = EXAMPLES[name]
    assert set(old) == set(current)
    assert {k: old[k] for k in V2_DEFAULTS[name]} == V2_DEFAULTS[name]
    assert old["worker"] == current["worker"]


def test_a_v2_policy_entry_reads_without_model_ranges(codec: Codec) -> None:
    """PolicyEntry v2 (before model affinity; tests/unit/golden/PolicyEntry.v2.bin) reads as
    the current record with no model partition ranges."""
    old = codec.decode((GOLDEN / "PolicyEntry.v2.bin").read_bytes(), expected="PolicyEntry")
    assert old == {**EXAMPLES["PolicyEntry"], "model_partitions": [], "model_rates": []}


def test_a_v1_ledger_entry_reads_with_no_output_written(codec: Codec) -> None:
    """LedgerEntry v1 (before the output file was part of a job's state) reads as the
    current record with no output written."""
    old = codec.decode((GOLDEN / "LedgerEntry.v1.bin").read_bytes(), expected="LedgerEntry")
    assert old == {**EXAMPLES["LedgerEntry"], "output_written_at": None}


def test_a_v2_ledger_entry_reads_with_no_max_attempt_recorded(codec: Codec) -> None:
    """LedgerEntry v2 (before a job summary carried its highest attempt) reads with 0: not
    recorded, so a replica that takes such a job over gives its earlier tasks no deadline."""
    old = codec.decode((GOLDEN / "LedgerEntry.v2.bin").read_bytes(), expected="LedgerEntry")
    assert old == {**EXAMPLES["LedgerEntry"], "max_attempt": 0}


def test_a_v1_task_reads_with_no_home_partition(codec: Codec) -> None:
    """Task v1 (from a controller before home partitions) reads with none: its worker sends
    the result to murmur2 of the job id, as before."""
    old = codec.decode((GOLDEN / "Task.v1.bin").read_bytes(), expected="Task")
    assert old == {**EXAMPLES["Task"], "home_partition": None}


def test_a_v1_job_event_reads_as_the_current_record(codec: Codec) -> None:
    """JobEvent v1 (before CANCELLED and home partitions) reads with no home partition."""
    old = codec.decode((GOLDEN / "JobEvent.v1.bin").read_bytes(), expected="JobEvent")
    assert old == {**EXAMPLES["JobEvent"], "home_partition": None}


def test_records_of_an_earlier_schema_version_still_decode(codec: Codec) -> None:
    """DeadLetter v1 (value not nullable, no origin_timestamp): its golden bytes read as the
    current record, with the new field at its default."""
    old = codec.decode((GOLDEN / "DeadLetter.v1.bin").read_bytes(), expected="DeadLetter")
    assert old == {**EXAMPLES["DeadLetter"], "origin_timestamp": None}


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_header_is_single_object_encoding_with_spec_fingerprint(codec: Codec, name: str) -> None:
    encoded = codec.encode(name, EXAMPLES[name])
    canonical = to_parsing_canonical_form(parse_schema(load_schema(name)))
    assert encoded[:2] == b"\xc3\x01"
    assert encoded[2:10].hex() == fingerprint(canonical, "CRC-64-AVRO")
    assert int.from_bytes(encoded[2:10], "little") == crc64_avro(canonical.encode())


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_is_documented_in_the_inferstream_namespace(name: str) -> None:
    schema = load_schema(name)
    assert schema["namespace"] == "inferstream"
    assert schema["name"] == name

    def fields(node: Any) -> list[dict[str, Any]]:
        if isinstance(node, list):
            return [f for branch in node for f in fields(branch)]
        if not isinstance(node, dict):
            return []
        own: list[dict[str, Any]] = node.get("fields", [])
        nested = [fields(node.get(key)) for key in ("type", "items", "values")]
        return own + [f for field in own for f in fields(field)] + [f for n in nested for f in n]

    assert all(field.get("doc") for field in fields(schema))


def test_defaults_fill_omitted_fields_and_timestamps_decode_as_int_ms(codec: Codec) -> None:
    when = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    job = codec.decode(codec.encode("Job", {"job_id": "j", "model": "m", "submitted_at": when}))
    assert job == {
        "job_id": "j",
        "model": "m",
        "model_version": None,
        "pool": "default",
        "top_k": 5,
        "chunk_size": 0,
        "inputs": [],
        "inline_items": [],
        "submitted_at": 1_704_067_200_000,
        "submitter": "",
        "output_path": None,
        "priority": 0,
        "weight": 1.0,
    }


def test_a_job_without_a_chunk_size_has_the_same_wire_format_as_before(codec: Codec) -> None:
    """chunk_size 0 ("not given": the policy sizes the tasks) changed only the field's default
    and doc, which the Parsing Canonical Form leaves out: Job records written before it
    (golden/Job.bin, chunk_size 16; an omitted chunk size was 32) keep their fingerprint
    and read unchanged, so the change needs no schema history file."""
    before = load_schema("Job")
    for field in before["fields"]:
        if field["name"] == "chunk_size":
            field["default"] = 32
    assert fingerprint(to_parsing_canonical_form(parse_schema(before)), "CRC-64-AVRO") == \
        fingerprint(to_parsing_canonical_form(parse_schema(load_schema("Job"))), "CRC-64-AVRO")
    assert codec.decode((GOLDEN / "Job.bin").read_bytes(), expected="Job")["chunk_size"] == 16


def test_decode_with_another_expected_type_is_a_schema_error(codec: Codec) -> None:
    encoded = codec.encode("Job", EXAMPLES["Job"])
    with pytest.raises(SchemaError, match="expected a Task record, got a Job record"):
        codec.decode(encoded, expected="Task")


def test_encode_names_the_field_that_does_not_fit(codec: Codec) -> None:
    with pytest.raises(SchemaError, match=r"Job\.top_k: got 'five' \(str\), expected int"):
        codec.encode("Job", {**EXAMPLES["Job"], "top_k": "five"})
    with pytest.raises(SchemaError, match=r"Job\.model: missing"):
        codec.encode("Job", {"job_id": "j", "submitted_at": T0})
    with pytest.raises(SchemaError, match="more fields than the schema specifies: colour"):
        codec.encode("Job", {**EXAMPLES["Job"], "colour": "blue"})
    with pytest.raises(SchemaError, match="unknown schema name 'Jobb'"):
        codec.encode("Jobb", EXAMPLES["Job"])


JOB_V1: dict[str, Any] = {
    "type": "record",
    "name": "Job",
    "namespace": "inferstream",
    "fields": [
        {"name": "job_id", "type": "string"},
        {"name": "model", "type": "string"},
        {"name": "inputs", "type": {"type": "array", "items": "string"}},
        {"name": "submitted_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "priority", "type": "int"},
    ],
}


def single_object(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """Encode `record` with fastavro alone, as a producer holding `schema` would."""
    parsed = parse_schema(schema)
    body = io.BytesIO()
    schemaless_writer(body, parsed, record)
    fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
    return b"\xc3\x01" + fp + body.getvalue()


def test_old_writer_is_projected_onto_the_current_schema() -> None:
    codec = Codec()
    old = single_object(
        JOB_V1, {"job_id": "j", "model": "m", "inputs": ["/x"], "submitted_at": T0, "priority": 9}
    )
    with pytest.raises(SchemaError, match="unknown fingerprint 0x"):
        codec.decode(old)
    codec.add_writer_schema(JOB_V1)
    assert codec.decode(old, expected="Job") == {
        "job_id": "j",
        "model": "m",
        "model_version": None,
        "pool": "default",
        "top_k": 5,
        "chunk_size": 0,
        "inputs": ["/x"],
        "inline_items": [],
        "submitted_at": T0,
        "submitter": "",
        "output_path": None,
        "priority": 9,
        "weight": 1.0,
    }


def test_writer_lacking_a_field_without_default_is_a_schema_error() -> None:
    codec = Codec()
    no_model = {**JOB_V1, "fields": [f for f in JOB_V1["fields"] if f["name"] != "model"]}
    codec.add_writer_schema(no_model)
    data = single_object(no_model, {"job_id": "j", "inputs": [], "submitted_at": T0, "priority": 1})
    with pytest.raises(SchemaError, match="not valid Avro for schema Job"):
        codec.decode(data)


def test_foreign_writer_schema_is_refused(codec: Codec) -> None:
    with pytest.raises(SchemaError, match="not an inferstream record"):
        codec.add_writer_schema({**JOB_V1, "namespace": "elsewhere"})
    with pytest.raises(SchemaError, match="not a valid Avro schema"):
        codec.add_writer_schema({"type": "record", "name": "Job", "fields": [{"name": "x"}]})


def _bad_bytes() -> list[tuple[bytes, str]]:
    job = Codec().encode("Job", EXAMPLES["Job"])
    bad_utf8 = bytearray(job)
    bad_utf8[11] = 0xFF  # first byte of job_id
    bad_enum = bytearray(Codec().encode("JobEvent", EXAMPLES["JobEvent"]))
    bad_enum[16] = 0x7E  # JobEventType index 63, right after the string "job-1"
    return [
        (b"", "truncated: empty record"),
        (b"\xc3", "truncated header"),
        (job[:7], "truncated header"),
        (job[:-3], "truncated Job record"),
        (job[:10], "truncated Job record"),
        (b"\xc3\x01" + b"\x00" * 8 + job[10:], "unknown fingerprint 0x0000000000000000"),
        (b'{"job_id": "j"}', "bad magic 0x7b22"),
        (b"\xc3\x02" + job[2:], "bad magic 0xc302"),
        (job + b"\x00", "trailing garbage: 1 bytes after the Job record"),
        (bytes(bad_utf8), "not valid Avro for schema Job: UnicodeDecodeError"),
        (bytes(bad_enum), "not valid Avro for schema JobEvent"),
        (b"\x00\x00\x00\x00\x2a" + job[10:], "unknown schema id 42"),
        (b"\x00\x00\x01", "truncated header: 3 bytes, need 5"),
    ]


@pytest.mark.parametrize(("data", "cause"), _bad_bytes())
def test_bad_bytes_raise_a_schema_error_naming_the_cause(
    codec: Codec, data: bytes, cause: str
) -> None:
    with pytest.raises(SchemaError) as info:
        codec.decode(data)
    assert cause in str(info.value)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_any_prefix_or_bit_flip_decodes_or_raises_schema_error(codec: Codec, name: str) -> None:
    encoded = codec.encode(name, EXAMPLES[name])
    for end in range(len(encoded)):
        with pytest.raises(SchemaError):
            codec.decode(encoded[:end])
    rng = random.Random(name)
    for _ in range(300):
        flipped = bytearray(encoded)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        try:
            codec.decode(bytes(flipped))
        except SchemaError:
            pass


def test_load_schema_returns_a_fresh_copy() -> None:
    schema = load_schema("Task")
    schema["fields"].clear()
    assert load_schema("Task")["fields"]
    assert json.loads(json.dumps(load_schema("Task"))) == load_schema("Task")


def test_decode_head_reads_the_leading_ids_of_a_record_alone(codec: Codec) -> None:
    """What a reader of the results topic needs to sort a result, read from the current and
    an earlier writer schema; another record type or fields not leading are an error."""
    ids = ("job_id", "task_id")
    current = codec.encode("TaskResult", EXAMPLES["TaskResult"])
    assert codec.decode_head(current, "TaskResult", ids) == {"job_id": "job-1", "task_id": 7}
    older = (GOLDEN / "TaskResult.v1.bin").read_bytes()
    assert codec.decode_head(older, "TaskResult", ids) == {"job_id": "job-1", "task_id": 7}
    declined = codec.encode("TaskDeclined", EXAMPLES["TaskDeclined"])
    with pytest.raises(SchemaError, match="expected a TaskResult record, got a TaskDeclined"):
        codec.decode_head(declined, "TaskResult", ids)
    with pytest.raises(SchemaError, match="TaskResult records do not begin with task_id"):
        codec.decode_head(current, "TaskResult", ("task_id",))
    with pytest.raises(SchemaError, match="truncated header"):
        codec.decode_head(current[:5], "TaskResult", ids)


def test_a_newer_writers_record_says_what_to_upgrade() -> None:
    """A record of a schema this release does not know (a newer release wrote it, during a
    rolling upgrade) is refused in one line that says to upgrade its reader first, the words
    a dead letter's reason and a REJECTED job's reason carry to the operator."""
    newer = single_object(
        {**JOB_V1, "fields": [*JOB_V1["fields"], {"name": "added", "type": "int", "default": 0}]},
        {"job_id": "j", "model": "m", "inputs": ["/x"], "submitted_at": T0, "priority": 0,
         "added": 1},
    )
    with pytest.raises(SchemaError) as refused:
        Codec().decode(newer)
    message = str(refused.value)
    assert "\n" not in message
    assert "upgrade the process that reads it first" in message
    assert "docs/operations.md#upgrades" in message
