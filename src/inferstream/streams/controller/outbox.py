"""What one controller round will write, collected before its transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from inferstream.schemas import Codec
from inferstream.schemas.records import JobEvent
from inferstream.streams.kafka.clients import Message, Outgoing
from inferstream.streams.kafka.deadletters import dead_letter
from inferstream.streams.kafka.settings import partition_for


@dataclass(frozen=True)
class ControllerTopics:
    """The full names of the topics a controller reads and writes."""

    jobs: str
    results: str
    events: str
    ledger: str
    dlq: str


@dataclass
class Outbox:
    """Records as (topic, partition, key, value), produced in order in one transaction.

    `partitions(topic)` gives a topic's partition count (the controller caches them).
    """

    topics: ControllerTopics
    codec: Codec
    partitions: Callable[[str], int]
    records: list[Outgoing] = field(default_factory=list)

    def add(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        self.records.append((topic, partition, key, value))

    def ledger(self, key: bytes, value: bytes, partition: int) -> None:
        """A ledger entry, on the ledger partition of its job's home partition."""
        self.add(self.topics.ledger, partition, key, value)

    def event(self, event: JobEvent) -> None:
        """A JobEvent, on the job-events partition of its job id."""
        topic = self.topics.events
        partition = partition_for(event["job_id"], self.partitions(topic))
        self.add(topic, partition, event["job_id"].encode(), self.codec.encode("JobEvent", event))

    def dead_letter(self, message: Message, reason: str) -> None:
        """The unreadable record, with where it came from, to the dead-letter topic."""
        _, timestamp_ms = message.timestamp()
        self.records.append(dead_letter(
            self.codec, self.topics.dlq, self.partitions(self.topics.dlq),
            topic=message.topic() or "", partition=message.partition() or 0,
            offset=message.offset() or 0, reason=reason, value=message.value(),
            consumer="controller", key=message.key(), timestamp_ms=timestamp_ms))
