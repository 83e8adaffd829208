"""Dead letters: a record that could not be read goes to `dlq` with where it came from and why.

The worker and the controller both dead-letter through `dead_letter`, so every dead letter
has the same shape and lands on the dlq partition of the same index as its origin.
"""

from __future__ import annotations

from inferstream.kafka.clients import Outgoing
from inferstream.schemas import Codec
from inferstream.schemas.records import new_dead_letter


def dead_letter(codec: Codec, dlq_topic: str, dlq_partitions: int, *, topic: str,
                partition: int, offset: int, reason: str, value: bytes | None, consumer: str,
                key: bytes | None = None, origin_timestamp_ms: int | None = None) -> Outgoing:
    """The dead letter of the record at `topic`/`partition`/`offset`, ready to produce."""
    record = new_dead_letter(topic, partition, offset, reason, value, consumer, key=key,
                             origin_timestamp_ms=origin_timestamp_ms)
    return Outgoing(dlq_topic, partition % dlq_partitions, key or b"",
                    codec.encode("DeadLetter", record))
