"""The typed read, written once: a record as the codec or a JSON API gives it, made the type
that stands for it, and back.

`as_record` follows the type's annotations: enum symbols become their enums, and a nested
record that a dataclass stands for (ModelPartitions: `ModelRange`) becomes one, in lists,
maps and nullable fields too. `plain_record` turns those dataclasses back into dicts for the
codec and JSON (enums are `str` already). A type without such fields costs a dict lookup.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, TypeVar, cast

from inferstream.schemas.codec import Codec
from inferstream.schemas.errors import SchemaError
from inferstream.schemas.records.announcements import WorkerAnnouncement
from inferstream.schemas.records.jobs import InlineItem, Job, JobEvent, Task, TaskItem
from inferstream.schemas.records.policy_entry import ModelRange, ModelRate, PolicyEntry
from inferstream.schemas.records.readings import Calibration, ModelPerformance, SysInfoSample
from inferstream.schemas.records.results import (
    ItemResult,
    NamedTensor,
    Prediction,
    ResultChunk,
    TaskDeclined,
    TaskResult,
)
from inferstream.schemas.records.streams import DeadLetter, StreamOrigin, StreamResult
from inferstream.schemas.records.tracking import LedgerEntry, TaskControl

#: A record type: a TypedDict.
R = TypeVar("R", bound=Mapping[str, object])
#: Converts one value to or from its type; None where a value needs no conversion.
Convert = Callable[[Any], Any]

#: Every record type by the name of its Avro record (top-level and nested).
RECORD_TYPES: dict[str, type] = {
    "Job": Job, "InlineItem": InlineItem, "Task": Task, "TaskItem": TaskItem,
    "TaskResult": TaskResult, "ItemResult": ItemResult, "Prediction": Prediction,
    "NamedTensor": NamedTensor, "TaskDeclined": TaskDeclined, "ResultChunk": ResultChunk,
    "JobEvent": JobEvent, "LedgerEntry": LedgerEntry, "DeadLetter": DeadLetter,
    "SysInfoSample": SysInfoSample, "ModelPerformance": ModelPerformance,
    "Calibration": Calibration, "PolicyEntry": PolicyEntry,
    "ModelPartitions": ModelRange, "ModelRate": ModelRate, "TaskControl": TaskControl,
    "StreamResult": StreamResult, "StreamOrigin": StreamOrigin,
    "WorkerAnnouncement": WorkerAnnouncement,
}


def read_record(codec: Codec, value: bytes, kind: type[R]) -> R:
    """The `kind` record in `value` (the Avro record named as the type), typed; SchemaError
    for bytes that hold no such record."""
    return as_record(kind, codec.decode(value, expected=kind.__name__))


def read_result(codec: Codec, value: bytes) -> TaskResult | TaskDeclined:
    """A record of the results topic: a TaskResult, or a worker's TaskDeclined."""
    name, record = codec.decode_named(value)
    declined = decline_of(name, record)
    return declined if declined is not None else as_record(TaskResult, record)


def decline_of(name: str, record: dict[str, Any]) -> TaskDeclined | None:
    """A record of the results topic, by its name: the TaskDeclined it is, None where it is
    a TaskResult; SchemaError for a record of any other kind."""
    if name == "TaskDeclined":
        return as_record(TaskDeclined, record)
    if name != "TaskResult":
        raise SchemaError(f"expected a TaskResult or TaskDeclined record, got a {name} record")
    return None


def as_record(kind: type[R], plain: dict[str, Any]) -> R:
    """`plain` typed as `kind`, in place; ValueError for a symbol its enum lacks."""
    convert = _typed(kind)
    return cast(R, plain if convert is None else convert(plain))


def plain_record(kind: type[R], record: R) -> dict[str, Any]:
    """`record` as the codec and JSON take it: a copy whose dataclass values are dicts."""
    convert = _plain(kind)
    return dict(record) if convert is None else cast(dict[str, Any], convert(record))


def _typed_leaf(hint: Any) -> Convert | None:
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return lambda value: hint(**value)
    return None


def _plain_leaf(hint: Any) -> Convert | None:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return dataclasses.asdict
    return None


@functools.cache
def _typed(hint: Any) -> Convert | None:
    return _walk(hint, _typed_leaf, _typed, copy=False)


@functools.cache
def _plain(hint: Any) -> Convert | None:
    return _walk(hint, _plain_leaf, _plain, copy=True)


def _walk(hint: Any, leaf: Callable[[Any], Convert | None],
          inner: Callable[[Any], Convert | None], *, copy: bool) -> Convert | None:
    """How to convert a value of `hint`: `leaf`'s converter for the hint itself, else one
    that converts what it holds (its fields, items or values, by `inner`)."""
    found = leaf(hint)
    if found is not None:
        return found
    if typing.is_typeddict(hint):
        return _fields(typing.get_type_hints(hint), inner, copy=copy)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return _each(inner(args[0]))
    if origin is dict:
        return _each_value(inner(args[1]))
    if origin is types.UnionType and len(args) == 2 and type(None) in args:
        return _unless_none(inner(next(a for a in args if a is not type(None))))
    return None


def _fields(hints: dict[str, Any], inner: Callable[[Any], Convert | None], *,
            copy: bool) -> Convert | None:
    fields = tuple((name, found) for name, hint in hints.items() if (found := inner(hint)))
    if not fields:
        return None

    def convert(record: dict[str, Any]) -> dict[str, Any]:
        converted = dict(record) if copy else record
        for name, field in fields:
            converted[name] = field(record[name])
        return converted

    return convert


def _each(item: Convert | None) -> Convert | None:
    return None if item is None else lambda values: [item(v) for v in values]


def _each_value(value: Convert | None) -> Convert | None:
    return None if value is None else lambda values: {k: value(v) for k, v in values.items()}


def _unless_none(convert: Convert | None) -> Convert | None:
    return None if convert is None else lambda value: None if value is None else convert(value)
