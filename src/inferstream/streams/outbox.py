"""What one controller round will write, collected before its transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import Message

from inferstream.streams.kafka import dead_letter_record, partition_for
from inferstream.streams.ledger import JobState, now_ms

if TYPE_CHECKING:
    from inferstream.streams.controller import Controller


@dataclass
class Outbox:
    """Records as (topic, partition, key, value), produced in order in one transaction."""

    records: list[tuple[str, int, bytes, bytes]] = field(default_factory=list)

    def add(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        self.records.append((topic, partition, key, value))

    def ledger(self, ctl: Controller, key: bytes, value: bytes, partition: int) -> None:
        self.add(ctl.topics["controller-ledger"], partition, key, value)

    def event(self, ctl: Controller, state: JobState, kind: str, reason: str | None = None
              ) -> None:
        """A JobEvent for `state`, on the job-events partition of its job id."""
        event = {
            "job_id": state.job_id, "type": kind, "timestamp": now_ms(),
            "model": state.job["model"], "reason": reason,
            "total_items": state.total_items,
            "total_tasks": state.issued_tasks if state.expanded else None,
            "done_items": state.done_items, "ok_items": state.ok_items,
            "error_items": state.error_items, "rate_items_per_s": state.rate_items_per_s(),
        }
        topic = ctl.topics["job-events"]
        partition = partition_for(state.job_id, ctl.partitions(topic))
        self.add(topic, partition, state.job_id.encode(), ctl.codec.encode("JobEvent", event))
        state.last_event_ms = event["timestamp"]
        state.changed = False

    def dead_letter(self, ctl: Controller, message: Message, reason: str) -> None:
        """The unreadable record, with where it came from, to the dead-letter topic."""
        _, timestamp_ms = message.timestamp()
        record = dead_letter_record(
            message.topic() or "", message.partition() or 0, message.offset() or 0, reason,
            message.value(), "controller", key=message.key(), timestamp_ms=timestamp_ms)
        topic = ctl.topics["dlq"]
        self.add(topic, (message.partition() or 0) % ctl.partitions(topic), message.key() or b"",
                 ctl.codec.encode("DeadLetter", record))
