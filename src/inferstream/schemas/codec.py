"""Avro encoding of inferstream's records, with schema evolution by writer fingerprint or id.

Records are plain dicts as fastavro reads and writes them. Timestamp fields
(`logicalType: timestamp-millis`) are encoded from int milliseconds since the Unix epoch (an
aware `datetime` is accepted too) and always decode to int milliseconds: the codec reads with
the logical types stripped, so consumers never pay for, or trip over, datetime conversion.

Wire formats:

* default: Avro single-object encoding, `C3 01` + the 8-byte little-endian CRC-64-AVRO
  fingerprint of the writer schema's Parsing Canonical Form + the Avro binary body;
* with a Schema Registry: the Confluent wire format, `00` + 4-byte big-endian schema id +
  body; schemas are registered under the RecordNameStrategy subject `inferstream.<Name>`.

Either codec decodes both formats (Confluent ones only if it has a registry or knows the id).
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form
from fastavro.validation import ValidationError, validate

from inferstream.schemas.errors import SchemaError
from inferstream.schemas.registry_tls import RegistryTls
from inferstream.schemas.schema_registry import SchemaRegistryClient

if TYPE_CHECKING:
    from inferstream.config import Config

NAMESPACE = "inferstream"
SCHEMA_NAMES: tuple[str, ...] = (
    "Job",
    "Task",
    "TaskResult",
    "ResultChunk",
    "TaskDeclined",
    "JobEvent",
    "SysInfoSample",
    "PolicyEntry",
    "DeadLetter",
    "LedgerEntry",
    "TaskControl",
    "StreamResult",
    "WorkerAnnouncement",
)

_MAGIC = b"\xc3\x01"
_HEADER_LEN = len(_MAGIC) + 8
_CONFLUENT_MAGIC = 0
_CONFLUENT_HEADER_LEN = 5


@functools.cache
def _schema_text(name: str) -> str:
    if name not in SCHEMA_NAMES:
        raise SchemaError(f"unknown schema name {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    return resources.files(__package__).joinpath(f"{name}.avsc").read_text(encoding="utf-8")


def load_schema(name: str) -> dict[str, Any]:
    """Return the current schema `name` ("Job", "Task", ...) as JSON; a fresh copy per call."""
    schema: dict[str, Any] = json.loads(_schema_text(name))
    return schema


def history_schemas() -> list[dict[str, Any]]:
    """Earlier versions of the schemas (`schemas/history/<Name>.v<N>.avsc`), which records
    already on the topics may have been written with: every codec reads them."""
    folder = resources.files(__package__).joinpath("history")
    return [json.loads(f.read_text(encoding="utf-8")) for f in sorted(
        folder.iterdir(), key=lambda f: f.name) if f.name.endswith(".avsc")]


def schema_fingerprint(schema: Any) -> bytes:
    """The 8 fingerprint bytes of a schema as single-object encoding writes them."""
    canonical = to_parsing_canonical_form(parse_schema(schema))
    # fastavro renders CRC-64-AVRO as the hex of its little-endian bytes, the wire order.
    return bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))


def _strip_logical_types(schema: Any) -> Any:
    """Copy of `schema` without logicalType annotations, so values read as their base type."""
    if isinstance(schema, dict):
        return {k: _strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical_types(item) for item in schema]
    return schema


@dataclass(frozen=True, slots=True)
class _Writer:
    """A writer schema the codec can read, and the reader schema it is projected onto."""

    name: str
    schema: Any  # fastavro-parsed writer schema, logical types stripped
    reader: Any  # fastavro-parsed current schema; None when the writer is the current one


class Codec:
    """Encodes and decodes inferstream records; parse once, share across threads.

    `registry_url` switches encoding to the Confluent wire format; `timeout_s` bounds each
    registry request, `user` and `password` log in with basic auth, `tls` checks an https
    registry (its CA, this client's certificate). Registry answers are cached for the
    codec's lifetime.
    """

    def __init__(self, registry_url: str | None = None, *, timeout_s: float = 10.0,
                 user: str | None = None, password: str | None = None,
                 tls: RegistryTls | None = None) -> None:
        self._registry = SchemaRegistryClient(
            registry_url, timeout_s=timeout_s, user=user, password=password, tls=tls,
        ) if registry_url else None
        self._write_schemas: dict[str, Any] = {}
        self._read_schemas: dict[str, Any] = {}
        self._fingerprints: dict[str, bytes] = {}
        self._by_fingerprint: dict[bytes, _Writer] = {}
        self._ids: dict[str, int] = {}
        self._by_id: dict[int, _Writer] = {}
        self._heads: dict[tuple[int, tuple[str, ...]], _Writer | None] = {}
        for name in SCHEMA_NAMES:
            self._add_current(name)
        for schema in history_schemas():
            self._learn(schema)

    @classmethod
    def for_config(cls, config: Config) -> Codec:
        """The codec a process of `config` uses: its schema registry, if any, logged in as
        schema_registry_user, checked with the schema_registry_*file settings."""
        return cls(config.schema_registry_url, user=config.schema_registry_user,
                   password=config.schema_registry_password, tls=RegistryTls.of(config))

    def _add_current(self, name: str) -> None:
        schema = load_schema(name)
        self._write_schemas[name] = parse_schema(schema)
        reader = parse_schema(_strip_logical_types(schema))
        self._read_schemas[name] = reader
        fp = schema_fingerprint(reader)
        self._fingerprints[name] = fp
        self._by_fingerprint[fp] = _Writer(name, reader, None)

    def encode(self, name: str, record: Mapping[str, Any]) -> bytes:
        """Encode `record` as a `name` record; SchemaError when it does not fit the schema.

        Fields with a default may be left out; fields the schema lacks are an error.
        """
        schema = self._write_schemas.get(name)
        if schema is None:
            raise SchemaError(f"unknown schema name {name!r}; known: {', '.join(SCHEMA_NAMES)}")
        buffer = io.BytesIO()
        buffer.write(self._header(name))
        try:
            schemaless_writer(buffer, schema, record, strict_allow_default=True)
        except Exception as exc:  # fastavro raises ValueError, TypeError, KeyError, ...
            raise SchemaError(
                f"record does not fit schema {name}: {_explain(schema, record, exc)}"
            ) from exc
        return buffer.getvalue()

    def decode(self, data: bytes, expected: str | None = None) -> dict[str, Any]:
        """Decode one record; with `expected`, a record of another type is a SchemaError."""
        writer, start = self._writer_for(data)
        if expected is not None and writer.name != expected:
            raise SchemaError(f"expected a {expected} record, got a {writer.name} record")
        return _read_body(data, start, writer)

    def decode_head(self, data: bytes, expected: str, names: tuple[str, ...]) -> dict[str, Any]:
        """The leading fields `names` of an `expected` record, read without the rest of it
        (the ids of a large record, at a fraction of its decoding); SchemaError as `decode`'s,
        or where the writer's record does not begin with those fields."""
        writer, start = self._writer_for(data)
        if writer.name != expected:
            raise SchemaError(f"expected a {expected} record, got a {writer.name} record")
        head = self._head(writer, names)
        if head is None:
            raise SchemaError(f"{writer.name} records do not begin with {', '.join(names)}")
        return _read(data, start, head)[0]

    def decode_leading(self, data: bytes, expected: str, names: tuple[str, ...]
                       ) -> tuple[str, dict[str, Any]]:
        """A record of any inferstream type, with its name: of an `expected` record written
        with the current schema, which begins with the fields `names`, those fields alone, as
        `decode_head` reads them; of any other (an older or foreign writer's too, whose
        fields of those names may have other types), the whole record, as `decode_named`
        reads it, projected onto the current schema."""
        writer, start = self._writer_for(data)
        current = writer.name == expected and writer.reader is None
        head = self._head(writer, names) if current else None
        if head is None:
            return writer.name, _read_body(data, start, writer)
        return writer.name, _read(data, start, head)[0]

    def _head(self, writer: _Writer, names: tuple[str, ...]) -> _Writer | None:
        """What reads the leading fields `names` of `writer`'s records, and stops; None where
        its records do not begin with them."""
        key = (id(writer), names)
        if key not in self._heads:
            fields = writer.schema["fields"][: len(names)]
            self._heads[key] = None if tuple(f["name"] for f in fields) != names else _Writer(
                writer.name, parse_schema({"type": "record", "fields": fields,
                                           "name": f"{NAMESPACE}.{writer.name}Head"}), None)
        return self._heads[key]

    def record_name(self, data: bytes) -> str:
        """The name of the record in `data` ("TaskResult", ...), read from its header alone;
        SchemaError as `decode`'s for bytes of no known writer."""
        return self._writer_for(data)[0].name

    def decode_named(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """Decode one record of any inferstream type; return its name ("Job", ...) and it."""
        writer, start = self._writer_for(data)
        return writer.name, _read_body(data, start, writer)

    def add_writer_schema(self, schema: dict[str, Any]) -> None:
        """Teach the codec to read records written with `schema`, an older or other version.

        Such records are found by fingerprint and projected onto the current schema of the
        same name: fields the writer lacks get their defaults, fields it added are dropped.
        """
        self._learn(schema)

    def _learn(self, schema: Any) -> _Writer:
        try:
            parsed = parse_schema(_strip_logical_types(schema))
            fp = schema_fingerprint(parsed)
        except Exception as exc:  # fastavro raises SchemaParseException, UnknownType, ...
            raise SchemaError(f"not a valid Avro schema: {exc}") from exc
        known = self._by_fingerprint.get(fp)
        if known is not None:
            return known
        full = parsed.get("name", "") if isinstance(parsed, dict) else ""
        namespace, _, name = full.rpartition(".")
        if namespace != NAMESPACE or name not in self._read_schemas:
            raise SchemaError(f"writer schema {full or schema!r} is not an inferstream record")
        writer = _Writer(name, parsed, self._read_schemas[name])
        self._by_fingerprint[fp] = writer
        return writer

    def _header(self, name: str) -> bytes:
        if self._registry is None:
            return _MAGIC + self._fingerprints[name]
        schema_id = self._ids.get(name)
        if schema_id is None:
            schema_id = self._registry.register(f"{NAMESPACE}.{name}", load_schema(name))
            self._ids[name] = schema_id
            self._by_id[schema_id] = self._by_fingerprint[self._fingerprints[name]]
        return bytes((_CONFLUENT_MAGIC,)) + schema_id.to_bytes(4, "big")

    def _writer_for(self, data: bytes) -> tuple[_Writer, int]:
        """The writer schema named by the header of `data`, and where the body starts."""
        if not data:
            raise SchemaError("truncated: empty record, no header")
        if data[0] == _MAGIC[0] and data[1:2] in (b"", _MAGIC[1:]):
            return self._writer_by_fingerprint(data), _HEADER_LEN
        if data[0] == _CONFLUENT_MAGIC:
            return self._writer_by_id(data), _CONFLUENT_HEADER_LEN
        raise SchemaError(
            f"bad magic 0x{bytes(data[:2]).hex()}: neither Avro single-object encoding (c301)"
            " nor Confluent wire format (00)"
        )

    def _writer_by_fingerprint(self, data: bytes) -> _Writer:
        if len(data) < _HEADER_LEN:
            raise SchemaError(f"truncated header: {len(data)} bytes, need {_HEADER_LEN}")
        fp = bytes(data[2:_HEADER_LEN])
        writer = self._by_fingerprint.get(fp)
        if writer is None:
            raise SchemaError(
                f"unknown fingerprint 0x{fp.hex()}: not a schema of this inferstream or an "
                "earlier one (a newer inferstream's record: upgrade the process that reads "
                "it first, docs/operations.md#upgrades)"
            )
        return writer

    def _writer_by_id(self, data: bytes) -> _Writer:
        if len(data) < _CONFLUENT_HEADER_LEN:
            raise SchemaError(f"truncated header: {len(data)} bytes, need {_CONFLUENT_HEADER_LEN}")
        schema_id = int.from_bytes(data[1:_CONFLUENT_HEADER_LEN], "big")
        writer = self._by_id.get(schema_id)
        if writer is not None:
            return writer
        if self._registry is None:
            raise SchemaError(f"unknown schema id {schema_id}: no schema registry configured")
        writer = self._learn(self._registry.schema_by_id(schema_id))
        self._by_id[schema_id] = writer
        return writer


def _read_body(data: bytes, start: int, writer: _Writer) -> dict[str, Any]:
    record, end = _read(data, start, writer)
    if end != len(data):
        raise SchemaError(
            f"trailing garbage: {len(data) - end} bytes after the {writer.name} record"
        )
    return record


def _read(data: bytes, start: int, writer: _Writer) -> tuple[dict[str, Any], int]:
    """The record that `writer` reads from `data` at `start`, and where it ends."""
    buffer = io.BytesIO(data)
    buffer.seek(start)
    try:
        record = schemaless_reader(buffer, writer.schema, writer.reader)
    except (EOFError, StopIteration) as exc:
        raise SchemaError(
            f"truncated {writer.name} record: {str(exc) or 'ran out of bytes'}"
        ) from exc
    except Exception as exc:  # fastavro raises struct/index/unicode/resolution errors
        raise SchemaError(f"not valid Avro for schema {writer.name}: {exc!r}") from exc
    if not isinstance(record, dict):
        raise SchemaError(f"not valid Avro for schema {writer.name}: read {type(record).__name__}")
    return record, buffer.tell()


def _explain(schema: Any, record: Any, exc: Exception) -> str:
    """Why fastavro refused `record`; fastavro's validator names the field, its writer may not."""
    try:
        validate(record, schema, raise_errors=True)
    except ValidationError as invalid:
        return _describe(invalid.errors)
    except Exception:  # noqa: S110 - the writer's own message is the fallback
        pass
    return f"{type(exc).__name__}: {exc}"


def _describe(errors: Any) -> str:
    """Validation errors as "field: got value (type), expected type | type"; one per field."""
    expected: dict[str, list[str]] = {}
    got: dict[str, str] = {}
    for error in errors:
        field = error.field or "record"
        expected.setdefault(field, []).append(_type_name(error.schema))
        if error.datum is None:
            got[field] = "missing or null"
        else:
            value = repr(error.datum)
            value = value if len(value) <= 60 else value[:57] + "..."
            got[field] = f"got {value} ({type(error.datum).__name__})"
    return "; ".join(
        f"{field}: {got[field]}, expected {' | '.join(types)}" for field, types in expected.items()
    )


def _type_name(schema: Any) -> str:
    if isinstance(schema, list):
        return " | ".join(_type_name(branch) for branch in schema)
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("logicalType") or schema.get("type"))
    return str(schema)
