"""Records about a record of any topic: a stream's label of it (StreamResult), and the
DeadLetter of one that could not be read."""

from __future__ import annotations

from typing import TypedDict

from inferstream.schemas.records.clock import now_ms
from inferstream.schemas.records.results import ItemStatus, NamedTensor, Prediction


class StreamOrigin(TypedDict):
    topic: str
    partition: int
    offset: int
    timestamp: int | None


class StreamResult(TypedDict):
    """The label of one input record of a stream (`--output-format avro`)."""

    status: ItemStatus
    top_k: list[Prediction]
    embedding: list[float] | None
    tensors: list[NamedTensor]
    error: str | None
    model: str
    model_version: str | None
    worker: str
    origin: StreamOrigin
    labelled_at: int


class DeadLetter(TypedDict):
    origin_topic: str
    origin_partition: int
    origin_offset: int
    reason: str
    key: bytes | None
    value: bytes | None
    timestamp: int
    origin_timestamp: int | None
    consumer: str


def new_dead_letter(topic: str, partition: int, offset: int, reason: str,
                    value: bytes | None, consumer: str, key: bytes | None = None,
                    origin_timestamp_ms: int | None = None) -> DeadLetter:
    """An unreadable record with where it came from and why, dead-lettered now; its value
    as read (None stays None: a tombstone is not an empty record)."""
    return DeadLetter(origin_topic=topic, origin_partition=partition, origin_offset=offset,
                      reason=reason, key=key, value=value, timestamp=now_ms(),
                      origin_timestamp=origin_timestamp_ms, consumer=consumer)
