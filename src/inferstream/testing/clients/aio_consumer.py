"""`MemoryAIOConsumer`: the aiokafka `AIOKafkaConsumer` calls the worker makes, in memory.

Rebalances reach the consumer inside `getmany`, before it fetches records: the listener
given to `subscribe` gets `on_partitions_revoked` with the whole old assignment (eager
protocol; an empty set on the first join, as aiokafka does), then `on_partitions_assigned`
with the whole new one. Like aiokafka, an exception in the listener is logged, not raised.
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    ConsumerStoppedError,
    IllegalOperation,
    IllegalStateError,
)
from aiokafka.structs import ConsumerRecord

from inferstream.testing.broker import (
    OFFSET_BEGINNING,
    OFFSET_COMMITTED,
    OFFSET_END,
    MemoryBroker,
)
from inferstream.testing.clients.aio_producer import faulted
from inferstream.testing.errors import NotMemberError, StaleGenerationError
from inferstream.testing.groups import ASSIGN, EXPIRED, GroupEvent
from inferstream.testing.log import StoredRecord

log = logging.getLogger(__name__)
#: aiokafka's default max_poll_records is None ("as many as fetched"); keep batches bounded
DEFAULT_MAX_RECORDS = 500


class MemoryAIOConsumer:
    """An aiokafka-shaped consumer of a MemoryBroker, in a group with `group_id`."""

    def __init__(self, broker: MemoryBroker, kwargs: dict[str, Any]) -> None:
        self._broker = broker
        self.group_id: str | None = kwargs.get("group_id")
        self.client_id = str(kwargs.get("client_id") or "aiokafka")
        self.read_committed = kwargs.get("isolation_level") == "read_committed"
        self.reset = str(kwargs.get("auto_offset_reset", "latest"))
        assignors = kwargs.get("partition_assignment_strategy") or ()
        self.strategy = ("range" if any("Range" in getattr(a, "__name__", str(a))
                                        for a in assignors) else "roundrobin")
        # A client-side assignor object first in the list (not a class) runs as aiokafka
        # runs it: metadata from every member, assign on the leader, on_assignment on each.
        first = assignors[0] if assignors else None
        self.assignor: Any = None if first is None or isinstance(first, type) else first
        self._coordinator = _Coordinator(self)
        self.member_id: str | None = None
        self.generation = -1
        self._topics: tuple[str, ...] = ()
        self._listener: Any = None
        self._positions: dict[TopicPartition, int] = {}  # negative: not yet resolved
        self._started = False
        self._closed = False

    # -- lifecycle and membership ------------------------------------------------------------
    def subscribe(self, topics: list[str], listener: Any = None) -> None:
        self._topics, self._listener = tuple(topics), listener
        if self._started:
            self._join()

    async def start(self) -> None:
        self._started = True
        if self._topics:
            self._join()

    async def stop(self) -> None:
        """Leave the group (aiokafka runs no listener callback here); a "leave" fault of the
        group stalls it or fails it (a CancelledError: aiokafka#647) with the member left in."""
        if self._closed:
            return
        self._closed = True
        if self.group_id is not None and self.member_id is not None:
            group_id, member_id = self.group_id, self.member_id
            await faulted(self._broker.take_fault(group_id, "leave"),
                          lambda: self._broker.leave(group_id, member_id), "leave")
        self._positions = {}

    def _join(self) -> None:
        if self.group_id is None:
            raise IllegalOperation("subscribe needs a group_id")
        if self.member_id is not None:
            self._broker.leave(self.group_id, self.member_id)
        self.member_id = self._broker.join(self.group_id, self.client_id, self._topics,
                                           self.strategy, self.assignor)

    def request_rejoin(self) -> None:
        """Revoke and join again (what aiokafka's coordinator does on `request_rejoin`)."""
        if self.group_id is not None and self.member_id is not None:
            self._broker.rebalance(self.group_id)

    async def _serve_group(self) -> None:
        while self.group_id is not None and self.member_id is not None:
            event = self._broker.next_event(self.group_id, self.member_id)
            if event is None:
                return
            if event.kind == ASSIGN:
                await self._assigned(event)
                continue
            await self._call_listener("on_partitions_revoked", set(self._positions))
            self._positions = {}
            if event.kind == EXPIRED:  # the heartbeat found the session gone: join again
                self.member_id = self._broker.join(self.group_id, self.client_id,
                                                   self._topics, self.strategy, self.assignor)
            else:
                self._broker.revoked(self.group_id, self.member_id)

    async def _assigned(self, event: GroupEvent) -> None:
        self.generation = event.generation
        if self.assignor is not None and self.group_id and self.member_id:
            self.assignor.on_assignment(self._broker.assignment_of(
                self.group_id, self.member_id, event.partitions))
        self._positions = {TopicPartition(t, p): OFFSET_COMMITTED for t, p in event.partitions}
        await self._call_listener("on_partitions_assigned", set(self._positions))

    async def _call_listener(self, name: str, partitions: set[TopicPartition]) -> None:
        if self._listener is None:
            return
        try:
            result = getattr(self._listener, name)(partitions)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("rebalance listener %s failed for group %s", name, self.group_id)

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    # -- reading -----------------------------------------------------------------------------
    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[Any]]:
        """Records of `partitions` (default: all assigned), waiting up to `timeout_ms`; a
        "fetch" fault of the group stalls it past that, as aiokafka's getmany waits for the
        group's next assignment while a rebalance waits for a member."""
        if self._closed:
            raise ConsumerStoppedError()
        await faulted(self._broker.take_fault(self.group_id, "fetch"), dict, "fetch")
        deadline = time.monotonic() + timeout_ms / 1000
        # No yield unless waiting, as aiokafka's fetcher: a rebalance never lands between
        # two calls that return records at once (the worker's per-partition fetch relies
        # on that).
        while True:
            since = self._broker.version
            await self._serve_group()
            got = self._fetch(partitions or tuple(self._positions),
                              max_records or DEFAULT_MAX_RECORDS)
            remaining = deadline - time.monotonic()
            if got or remaining <= 0:
                return got
            await self._broker.wait_async(since, remaining)

    def _fetch(self, partitions: tuple[TopicPartition, ...], limit: int
               ) -> dict[TopicPartition, list[Any]]:
        got: dict[TopicPartition, list[Any]] = {}
        for tp in partitions:
            if limit <= 0:
                break
            if tp not in self._positions:
                continue
            key = (tp.topic, tp.partition)
            position = self._resolve(tp)
            records, self._positions[tp], _ = self._broker.fetch(
                key, position, self.read_committed, limit)
            if records:
                got[tp] = [_consumer_record(r) for r in records]
                limit -= len(records)
        return got

    def _resolve(self, tp: TopicPartition) -> int:
        return self._broker.resolve(self.group_id, (tp.topic, tp.partition),
                                    self._positions[tp], self.reset, self.read_committed)

    # -- positions and offsets ---------------------------------------------------------------
    def seek(self, partition: TopicPartition, offset: int) -> None:
        if not isinstance(offset, int) or offset < 0:
            raise ValueError("Offset must be a positive integer")
        self._check_assigned(partition)
        self._positions[partition] = offset

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._positions):
            self._check_assigned(tp)
            self._positions[tp] = OFFSET_BEGINNING

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._positions):
            self._check_assigned(tp)
            self._positions[tp] = OFFSET_END

    async def position(self, partition: TopicPartition) -> int:
        self._check_assigned(partition)
        self._positions[partition] = self._resolve(partition)
        return self._positions[partition]

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        """The end of `partition` as this consumer reads it (read_committed: below any open
        transaction; aiokafka reports -1 for read_uncommitted)."""
        self._check_assigned(partition)
        if not self.read_committed:
            return -1
        return self._broker.end_offset((partition.topic, partition.partition), True)

    async def committed(self, partition: TopicPartition) -> int | None:
        if self.group_id is None:
            raise IllegalOperation("Requires group_id")
        return self._broker.committed(self.group_id, (partition.topic, partition.partition))

    async def commit(self, offsets: dict[TopicPartition, Any] | None = None) -> None:
        """Commit `offsets` (offset or (offset, metadata) per partition); CommitFailedError
        once the group has moved on without this member or generation."""
        if self.group_id is None:
            raise IllegalOperation("Requires group_id")
        if self.member_id is None:
            raise IllegalStateError("Not subscribed to any topics")
        if offsets is None:
            offsets = {tp: self._resolve(tp) for tp in self._positions}
        for tp in offsets:
            self._check_assigned(tp)
        plain = {(tp.topic, tp.partition): v[0] if isinstance(v, tuple) else v
                 for tp, v in offsets.items()}
        group_id, member_id = self.group_id, self.member_id
        fault = self._broker.take_fault(group_id, "offset_commit")
        try:
            await faulted(fault, lambda: self._broker.commit_offsets(
                group_id, member_id, self.generation, plain), "offset_commit")
        except (NotMemberError, StaleGenerationError) as exc:
            raise CommitFailedError(str(exc)) from exc

    def _check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self._positions:
            raise IllegalStateError(f"Partition {tp} is not assigned")


def _consumer_record(record: StoredRecord) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic=record.topic, partition=record.partition, offset=record.offset,
        timestamp=record.timestamp_ms, timestamp_type=0, key=record.key, value=record.value,
        checksum=None, serialized_key_size=len(record.key or b""),
        serialized_value_size=len(record.value or b""), headers=list(record.headers))


class _Coordinator:
    """Models the part of aiokafka's GroupCoordinator that `policy/rejoin.py` uses."""

    def __init__(self, consumer: MemoryAIOConsumer) -> None:
        self._consumer = consumer
        self._rejoin_needed_fut = None

    def request_rejoin(self) -> None:
        self._consumer.request_rejoin()
