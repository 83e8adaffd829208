"""TaskResult and StreamResult v2 (model_version, embeddings, tensors) against v1 (top-k only),
both ways: the new reader reads v1 records, and a v1 reader still reads every v2 record it
could read before (Avro schema resolution, the v1 schema as the reader's)."""

from __future__ import annotations

import copy
import io
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from inferstream.schemas import Codec, load_schema
from tests.unit.examples import EXAMPLES

GOLDEN = Path(__file__).parent / "golden"
NAMES = ("TaskResult", "StreamResult")
#: float32 values, so that they survive Avro's float exactly
VECTOR = [0.5, -1.25, 3.0, 0.0078125]
TENSOR = {"name": "logits", "dtype": "float32", "shape": [2, 2],
          "data": b"\x00\x00\x80\x3f" * 4}


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec()


def v1_schema(name: str) -> dict[str, Any]:
    text = resources.files("inferstream.schemas").joinpath(f"history/{name}.v1.avsc")
    schema: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return schema


def millis(schema: Any) -> Any:
    """`schema` with timestamps read as int milliseconds, as inferstream's codec reads them."""
    if isinstance(schema, dict):
        return {k: millis(v) for k, v in schema.items() if k != "logicalType"}
    return [millis(s) for s in schema] if isinstance(schema, list) else schema


def read_as_v1(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """`record` written with the current schema, read by a reader that has only v1."""
    body = io.BytesIO()
    writer = parse_schema(millis(load_schema(name)))
    schemaless_writer(body, writer, record)
    body.seek(0)
    read: dict[str, Any] = schemaless_reader(body, writer, parse_schema(millis(v1_schema(name))))
    return read


def without_v2(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """`record` as v1 holds it: no model version, no embedding, no tensors, no item
    counts (v3), no chunks (v4)."""
    drop = ("model_version", "embedding", "tensors", "ok_count", "error_count", "chunks",
            "chunk_id")
    old = {k: v for k, v in record.items() if k not in drop}
    if name == "TaskResult":
        old["items"] = [{k: v for k, v in i.items() if k not in drop} for i in record["items"]]
    return old


def with_output(name: str, **output: Any) -> dict[str, Any]:
    """The example record whose (first) item holds `output` instead of predictions."""
    record = copy.deepcopy(EXAMPLES[name])
    target = record["items"][0] if name == "TaskResult" else record
    target.update({"top_k": [], **output})
    return record


@pytest.mark.parametrize("name", NAMES)
def test_a_v1_record_reads_with_no_version_embedding_or_tensors(codec: Codec, name: str) -> None:
    old = codec.decode((GOLDEN / f"{name}.v1.bin").read_bytes(), expected=name)
    uncounted = {"ok_count": -1, "error_count": -1} if name == "TaskResult" else {}
    assert old == {**EXAMPLES[name], "model_version": None, **uncounted}
    outputs = old["items"] if name == "TaskResult" else [old]
    assert all(o["embedding"] is None and o["tensors"] == [] for o in outputs)


@pytest.mark.parametrize("name", NAMES)
def test_a_v1_reader_reads_a_v2_record_of_predictions_as_before(name: str) -> None:
    assert read_as_v1(name, EXAMPLES[name]) == without_v2(name, EXAMPLES[name])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("output", [{"embedding": VECTOR}, {"tensors": [TENSOR]}],
                         ids=["embedding", "tensors"])
def test_a_v1_reader_reads_a_v2_embedding_or_tensors_record_without_the_output(
        name: str, output: dict[str, Any]) -> None:
    """Everything v1 knows of such a record still reads: status, names, model, no top-k."""
    record = with_output(name, **output)
    assert read_as_v1(name, record) == without_v2(name, record)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("output", [{"embedding": VECTOR}, {"tensors": [TENSOR]}],
                         ids=["embedding", "tensors"])
def test_embeddings_and_tensors_round_trip_through_the_codec(
        codec: Codec, name: str, output: dict[str, Any]) -> None:
    record = with_output(name, **output)
    assert codec.decode(codec.encode(name, record), expected=name) == record
