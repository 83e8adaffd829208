"""Reading a record as a reader that holds an earlier schema would: what the schema tests of
each new schema version check (a reader of the earlier version still reads every record)."""

from __future__ import annotations

import io
import json
from importlib import resources
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from inferstream.schemas import load_schema


def millis(schema: Any) -> Any:
    """`schema` with timestamps read as int milliseconds, as inferstream's codec reads them."""
    if isinstance(schema, dict):
        return {k: millis(v) for k, v in schema.items() if k != "logicalType"}
    return [millis(s) for s in schema] if isinstance(schema, list) else schema


def read_as(history: str, name: str, record: dict[str, Any]) -> dict[str, Any]:
    """`record` written with the current schema `name`, read by a reader that has the
    schema `history/<history>.avsc` (Avro schema resolution)."""
    text = resources.files("inferstream.schemas").joinpath(f"history/{history}.avsc")
    body = io.BytesIO()
    writer = parse_schema(millis(load_schema(name)))
    schemaless_writer(body, writer, record)
    body.seek(0)
    reader = parse_schema(millis(json.loads(text.read_text(encoding="utf-8"))))
    read: dict[str, Any] = schemaless_reader(body, writer, reader)
    return read


def history_fields(history: str) -> set[str]:
    """The field names of the schema `history/<history>.avsc`."""
    text = resources.files("inferstream.schemas").joinpath(f"history/{history}.avsc")
    return {field["name"] for field in json.loads(text.read_text(encoding="utf-8"))["fields"]}
