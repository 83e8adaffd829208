"""`MemoryConsumer`: the confluent-kafka `Consumer` calls inferstream makes, in memory.

Group rebalances reach the consumer inside `consume`/`poll`, as librdkafka serves them: the
`on_revoke` callback (`on_lost`, where given, for a member the group expired) gets the whole
old assignment (eager protocol), then `on_assign` the
whole new one; a callback that does not call `assign` itself gets the default assignment.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from inferstream.kafka.clients import Message, RebalanceCallback
from inferstream.kafka.settings import PARTITION_EOF
from inferstream.testing.broker import MemoryBroker
from inferstream.testing.clients.metadata import (
    INVALID_ARG,
    STATE,
    ClusterMetadata,
    GroupMetadata,
    MemoryMessage,
    cluster_metadata,
    kafka_errors,
)
from inferstream.testing.groups import ASSIGN, EXPIRED, GroupEvent
from inferstream.testing.log import Key


def _flag(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


class MemoryConsumer:
    """A confluent-kafka-shaped consumer of a MemoryBroker (subscribe or assign)."""

    def __init__(self, broker: MemoryBroker, settings: dict[str, Any]) -> None:
        self._broker = broker
        self.group_id: str | None = settings.get("group.id")
        self.client_id = str(settings.get("client.id", "rdkafka"))
        # librdkafka's defaults: read_committed, reset to the end, range first
        self.read_committed = settings.get("isolation.level", "read_committed") != (
            "read_uncommitted")
        self.reset = str(settings.get("auto.offset.reset", "largest"))
        self.partition_eof = _flag(settings.get("enable.partition.eof", False))
        strategies = str(settings.get("partition.assignment.strategy", "range,roundrobin"))
        self.strategy = strategies.split(",")[0].strip()
        self.member_id: str | None = None
        self.generation = -1
        self._topics: tuple[str, ...] = ()
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._on_lost: RebalanceCallback | None = None
        self._positions: dict[Key, int] = {}  # assigned partitions; negative: not yet resolved
        self._eof_told: set[Key] = set()
        self._assigned_in_callback = False
        self._closed = False

    # -- group membership --------------------------------------------------------------------
    def subscribe(self, topics: list[str], on_assign: RebalanceCallback | None = None,
                  on_revoke: RebalanceCallback | None = None,
                  on_lost: RebalanceCallback | None = None) -> None:
        self._check_open()
        if self.group_id is None:
            raise KafkaException(KafkaError(INVALID_ARG, "group.id is required"))
        if self.member_id is not None:
            self._broker.leave(self.group_id, self.member_id)
        self._topics, self._on_assign, self._on_revoke = tuple(topics), on_assign, on_revoke
        self._on_lost = on_lost
        self.member_id = self._broker.join(self.group_id, self.client_id, self._topics,
                                           self.strategy)

    def _serve_group(self) -> None:
        """Run the rebalance callbacks the group has for this member, if any."""
        while self.group_id is not None and self.member_id is not None:
            event = self._broker.next_event(self.group_id, self.member_id)
            if event is None:
                return
            if event.kind == ASSIGN:
                self._assigned(event)
                continue
            self._revoke_all(lost=event.kind == EXPIRED)
            if event.kind == EXPIRED:  # librdkafka rejoins under a new member id
                self.member_id = self._broker.join(self.group_id, self.client_id,
                                                   self._topics, self.strategy)
            else:
                self._broker.revoked(self.group_id, self.member_id)

    def _revoke_all(self, lost: bool = False) -> None:
        """The whole assignment revoked; `lost` (the member expired) to `on_lost` where the
        consumer was given one, as librdkafka does, else to `on_revoke`."""
        if not self._positions:
            return
        self._assigned_in_callback = False
        callback = (self._on_lost or self._on_revoke) if lost else self._on_revoke
        if callback is not None:
            callback(self, self.assignment())
        if not self._assigned_in_callback:
            self.unassign()

    def _assigned(self, event: GroupEvent) -> None:
        self.generation = event.generation
        partitions = [TopicPartition(t, p, OFFSET_INVALID) for t, p in event.partitions]
        self._assigned_in_callback = False
        if self._on_assign is not None:
            self._on_assign(self, partitions)
        if not self._assigned_in_callback:
            self.assign(partitions)

    def consumer_group_metadata(self) -> GroupMetadata:
        self._check_open()
        return GroupMetadata(self.group_id or "", self.member_id or "", self.generation)

    # -- assignment and positions ------------------------------------------------------------
    def assign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        self._assigned_in_callback = True
        self._positions = {}
        self._eof_told = set()
        for tp in partitions:
            self._broker.partition_count(tp.topic)
            self._positions[(tp.topic, tp.partition)] = tp.offset

    def unassign(self) -> None:
        self._assigned_in_callback = True
        self._positions = {}
        self._eof_told = set()

    def assignment(self) -> list[TopicPartition]:
        self._check_open()
        return [TopicPartition(t, p) for t, p in self._positions]

    def seek(self, partition: TopicPartition) -> None:
        key = (partition.topic, partition.partition)
        if key not in self._positions:
            raise KafkaException(KafkaError(STATE, f"{key} is not assigned"))
        self._positions[key] = partition.offset
        self._eof_told.discard(key)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self._check_open()
        found = []
        for tp in partitions:
            offset = self._positions.get((tp.topic, tp.partition), OFFSET_INVALID)
            found.append(TopicPartition(tp.topic, tp.partition,
                                        offset if offset >= 0 else OFFSET_INVALID))
        return found

    def committed(self, partitions: list[TopicPartition], timeout: float = -1
                  ) -> list[TopicPartition]:
        self._check_open()
        fault = self._broker.take_fault(self.group_id, "offset_fetch")
        if fault is not None and fault.fail is not None:  # a refused group, say
            raise fault.error or KafkaException(KafkaError(KafkaError._TIMED_OUT))  # noqa: SLF001
        found = []
        for tp in partitions:
            offset = (None if self.group_id is None
                      else self._broker.committed(self.group_id, (tp.topic, tp.partition)))
            found.append(TopicPartition(tp.topic, tp.partition,
                                        OFFSET_INVALID if offset is None else offset))
        return found

    # -- reading -----------------------------------------------------------------------------
    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to `num_messages` records (and events); waits up to `timeout` s for the first."""
        self._check_open()
        deadline = None if timeout < 0 else time.monotonic() + timeout
        while True:
            since = self._broker.version
            self._serve_group()
            messages = self._fetch(num_messages)
            remaining = None if deadline is None else deadline - time.monotonic()
            if messages or (remaining is not None and remaining <= 0):
                return messages
            self._broker.wait(since, remaining)

    def poll(self, timeout: float = -1) -> Message | None:
        messages = self.consume(1, timeout)
        return messages[0] if messages else None

    def _fetch(self, limit: int) -> list[Message]:
        out: list[Message] = []
        for key in list(self._positions):
            if len(out) >= limit:
                break
            with kafka_errors():
                position = self._broker.resolve(self.group_id, key, self._positions[key],
                                                self.reset, self.read_committed)
                records, position, end = self._broker.fetch(key, position, self.read_committed,
                                                            limit - len(out))
            self._positions[key] = position
            out.extend(MemoryMessage(r.topic, r.partition, r.offset, r.key, r.value,
                                     r.timestamp_ms, headers=r.headers) for r in records)
            if records:
                self._eof_told.discard(key)
            if (self.partition_eof and position >= end and key not in self._eof_told
                    and len(out) < limit):  # else the next fetch tells it (poll takes one)
                self._eof_told.add(key)
                out.append(MemoryMessage(*key, position,
                                         error=KafkaError(PARTITION_EOF)))
        return out

    # -- metadata ----------------------------------------------------------------------------
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return cluster_metadata(self._broker, topic)

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float = -1
                          ) -> list[TopicPartition]:
        with kafka_errors():
            return [TopicPartition(tp.topic, tp.partition, self._broker.offset_for_time(
                (tp.topic, tp.partition), tp.offset, self.read_committed))
                for tp in partitions]

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]:
        with kafka_errors():
            key = (partition.topic, partition.partition)
            return (self._broker.start_offset(key),
                    self._broker.end_offset(key, self.read_committed))

    def close(self) -> None:
        """Revoke (running `on_revoke`) and leave the group, as librdkafka's close does."""
        if self._closed:
            return
        if self.group_id is not None and self.member_id is not None:
            self._revoke_all()
            self._broker.leave(self.group_id, self.member_id)
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")
