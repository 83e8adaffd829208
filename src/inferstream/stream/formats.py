"""What a stream reads and writes: input records into items, outcomes into output records.

Input (`--input-format`): `bytes` (the value is the item: an encoded image, or for a `tensor`
model a `.npy` file's bytes or a JSON array), `url` (a UTF-8 path or `file://` / `http(s)://`
URI), `json` (an object whose `--field` holds base64 bytes, a URI, or for a `tensor` model a
nested array of numbers) and `avro` (a record framed by the Confluent registry or in
single-object encoding, whose `--field` is bytes, a string URI or an array of numbers). A
record that cannot be read raises `RecordError`; the item itself is decoded later, by the
worker's pipeline, like any job item (an array becomes the JSON array a tensor model reads).

Output (`--output-format`): `json` (one UTF-8 object per record: the output in the keys of
`records.output_json`, the model and its version; NaN and +-inf values as null) or `avro` (an
`inferstream.StreamResult` through the codec).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader

from inferstream.config import Config
from inferstream.errors import ConfigError
from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.codec import schema_fingerprint
from inferstream.schemas.json_text import encode, strict_encoder
from inferstream.schemas.records import (
    ItemResult,
    StreamOrigin,
    StreamResult,
    TaskItem,
    output_json,
)
from inferstream.schemas.schema_registry import registry_client
from inferstream.stream.errors import RecordError

#: Strings made only of the base64 alphabet, padded to a multiple of 4: read as image bytes.
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_URI_SCHEMES = ("file://", "http://", "https://")
#: Longer strings are never taken for paths (Linux's PATH_MAX).
_PATH_MAX = 4096
_SOE_MAGIC = b"\xc3\x01"
_SOE_HEADER = 10
_CONFLUENT_HEADER = 5
#: An output record's JSON, compact; made once (`json.dumps` with options makes one a call).
_COMPACT = strict_encoder(separators=(",", ":"))


def item_name(origin: StreamOrigin) -> str:
    """How an input record is named in logs and errors: `topic/partition@offset`."""
    return f"{origin['topic']}/{origin['partition']}@{origin['offset']}"


class InputReader:
    """Turns one input record's value into the item the pipeline decodes."""

    def __init__(self, config: Config) -> None:
        stream = config.stream
        self.format = stream.input_format
        self.field = [part for part in stream.field.split(".") if part]
        self.avro = AvroEnvelope(config) if self.format == "avro" else None

    def item(self, value: bytes | None, origin: StreamOrigin) -> TaskItem:
        """The item of one record; RecordError when the record itself cannot be read."""
        name = item_name(origin)
        if value is None:
            raise RecordError("null value (a tombstone): no item")
        if self.format == "bytes":
            return TaskItem(index=origin["offset"], name=name, data=value)
        if self.format == "url":
            return TaskItem(index=origin["offset"], name=_text(value, "url"), data=None)
        if self.format == "json":
            found = _lookup(_json_object(value), self.field)
        else:
            assert self.avro is not None  # noqa: S101
            found = _lookup(self.avro.decode(value), self.field)
        return _field_item(found, ".".join(self.field), origin["offset"], name)


def _text(value: bytes, what: str) -> str:
    try:
        text = value.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise RecordError(f"{what} record is not UTF-8: {exc.reason} at byte {exc.start}") from exc
    if not text:
        raise RecordError(f"empty {what}")
    return text


def _json_object(value: bytes) -> dict[str, Any]:
    try:
        decoded = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"not JSON: {exc}") from exc
    if not isinstance(decoded, dict):
        raise RecordError(f"JSON record is a {type(decoded).__name__}, not an object")
    return decoded


def _lookup(record: dict[str, Any], path: list[str]) -> Any:
    found: Any = record
    for depth, part in enumerate(path):
        if not isinstance(found, dict) or part not in found:
            raise RecordError(f"no field {'.'.join(path[:depth + 1])!r} in the record")
        found = found[part]
    return found


def _field_item(found: Any, field: str, index: int, name: str) -> TaskItem:
    """bytes are the item; a string is a URI or path, or base64 of the item; an array (of
    numbers, nested) is a tensor, as the JSON array its model reads."""
    if isinstance(found, bytes):
        return TaskItem(index=index, name=name, data=found)
    if isinstance(found, list):
        return TaskItem(index=index, name=name, data=json.dumps(found).encode())
    if not isinstance(found, str):
        raise RecordError(f"field {field!r} is {type(found).__name__}, not bytes, a string "
                          "or an array")
    text = found.strip()
    if not text:
        raise RecordError(f"field {field!r} is empty")
    if text.lower().startswith(_URI_SCHEMES) or not _BASE64.fullmatch(text) \
            or _names_a_file(text):
        return TaskItem(index=index, name=text, data=None)
    try:
        return TaskItem(index=index, name=name, data=base64.b64decode(text, validate=True))
    except binascii.Error as exc:  # the pattern admits only valid base64: not expected
        raise RecordError(f"field {field!r}: bad base64: {exc}") from exc


def _names_a_file(text: str) -> bool:
    """Whether `text`, which base64 could read too (`/data/items/abc1`), is the path of a
    file here: then it is that file. (Base64 of a photo is far longer than a path.)"""
    return "/" in text and len(text) < _PATH_MAX and Path(text).is_file()


class AvroEnvelope:
    """Reads foreign Avro records: Confluent-framed (`00` + schema id, through the registry
    of `--schema-registry-url`) or single-object encoded (`C3 01` + fingerprint, with the
    writer schema of `--input-schema`)."""

    def __init__(self, config: Config) -> None:
        self._registry = registry_client(config)
        self._by_id: dict[int, Any] = {}
        self._by_fingerprint: dict[bytes, Any] = {}
        path = config.stream.input_schema
        if path is not None:
            schema = _load_schema_file(path)
            self._by_fingerprint[schema_fingerprint(schema)] = schema
        if self._registry is None and not self._by_fingerprint:
            raise ConfigError("--input-format avro needs --input-schema FILE.avsc "
                              "(single-object encoding) or --schema-registry-url")

    def decode(self, value: bytes) -> dict[str, Any]:
        schema, start = self._writer(value)
        buffer = io.BytesIO(value)
        buffer.seek(start)
        try:
            record = schemaless_reader(buffer, schema, None)
        except Exception as exc:  # fastavro raises EOF, struct, unicode and index errors
            raise RecordError(f"not valid Avro for its writer schema: {exc!r}") from exc
        if buffer.tell() != len(value):
            raise RecordError(f"trailing garbage: {len(value) - buffer.tell()} bytes")
        if not isinstance(record, dict):
            raise RecordError(f"Avro value is a {type(record).__name__}, not a record")
        return record

    def _writer(self, value: bytes) -> tuple[Any, int]:
        if value[:2] == _SOE_MAGIC and len(value) >= _SOE_HEADER:
            fingerprint = bytes(value[2:_SOE_HEADER])
            schema = self._by_fingerprint.get(fingerprint)
            if schema is None:
                raise RecordError(f"unknown writer fingerprint 0x{fingerprint.hex()} "
                                  "(not the schema of --input-schema)")
            return schema, _SOE_HEADER
        if value[:1] == b"\x00" and len(value) >= _CONFLUENT_HEADER:
            return self._schema_by_id(int.from_bytes(value[1:_CONFLUENT_HEADER], "big")), \
                _CONFLUENT_HEADER
        raise RecordError(f"not framed Avro: starts 0x{bytes(value[:2]).hex()}, neither "
                          "single-object encoding (c301) nor the registry's wire format (00)")

    def _schema_by_id(self, schema_id: int) -> Any:
        schema = self._by_id.get(schema_id)
        if schema is not None:
            return schema
        if self._registry is None:
            raise RecordError(f"registry-framed record (schema id {schema_id}) but no "
                              "--schema-registry-url")
        try:
            schema = parse_schema(self._registry.schema_by_id(schema_id))
        except SchemaError as exc:
            raise RecordError(f"schema id {schema_id}: {exc}") from exc
        self._by_id[schema_id] = schema
        return schema


def _load_schema_file(path: str) -> Any:
    try:
        return parse_schema(json.loads(Path(path).read_text(encoding="utf-8")))
    except OSError as exc:
        raise ConfigError(f"--input-schema {path}: {exc.strerror}") from exc
    except Exception as exc:  # json and fastavro parse errors
        raise ConfigError(f"--input-schema {path} is not an Avro schema: {exc}") from exc


class OutputWriter:
    """Renders one outcome as the output record's value."""

    def __init__(self, config: Config, codec: Codec) -> None:
        self.format = config.stream.output_format
        self.codec = codec

    def value(self, result: StreamResult) -> bytes:
        if self.format == "avro":
            return self.codec.encode("StreamResult", result)
        shown = {"status": result["status"].lower(), **output_json(result),
                 "error": result["error"], "model": result["model"],
                 "model_version": result["model_version"], "worker": result["worker"],
                 "origin": {k: result["origin"][k] for k in ("topic", "partition", "offset")}}
        return encode(_COMPACT, shown).encode()


def stream_result(outcome: ItemResult, model: str, model_version: str | None, worker: str,
                  origin: StreamOrigin, labelled_at: int) -> StreamResult:
    return StreamResult(status=outcome["status"], top_k=outcome["top_k"],
                        embedding=outcome["embedding"], tensors=outcome["tensors"],
                        error=outcome["error"], model=model, model_version=model_version,
                        worker=worker, origin=origin, labelled_at=labelled_at)
