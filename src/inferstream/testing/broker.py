"""`MemoryBroker`: topics, consumer groups and transactions in memory, for unit tests.

One broker stands for a whole cluster. Clients from `MemoryKafkaClients(broker)` talk to it
through the methods below; tests create topics, look at what was written and inject faults
(`inject`, `fence`, `expire_member`). Every method takes the broker's one lock, so clients
may call from any thread (the controller's helper threads do); callbacks never run under it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from inferstream.testing.errors import Fault, UnknownPartitionError, UnknownTopicError
from inferstream.testing.groups import GroupCoordinator, GroupEvent
from inferstream.testing.log import Key, PartitionLog, StoredRecord
from inferstream.testing.transactions import TransactionCoordinator

if TYPE_CHECKING:
    from inferstream.kafka.topics import TopicSpec

#: Special offsets, as confluent-kafka numbers them (aiokafka uses its own calls instead).
OFFSET_BEGINNING, OFFSET_END = -2, -1
#: A position still to be resolved: the group's committed offset, else the reset policy.
OFFSET_COMMITTED = -1000
_Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Event]


class MemoryBroker:
    """An in-memory Kafka cluster: partition logs, groups, transactions, one lock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._version = 0
        self._waiters: set[_Waiter] = set()
        self._logs: dict[str, list[PartitionLog]] = {}
        self._partition_counts: dict[str, int] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self.groups = GroupCoordinator(self._partition_counts)
        self.transactions = TransactionCoordinator(self._log, self.groups.commit)

    # -- what tests call ---------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1,
                     configs: dict[str, str] | None = None) -> None:
        """Create `name` (an existing topic is left as it is)."""
        with self._changing():
            if name not in self._logs:
                self._logs[name] = [PartitionLog(name, p) for p in range(partitions)]
                self._partition_counts[name] = partitions
                self._configs[name] = dict(configs or {})

    def add_partitions(self, name: str, partitions: int) -> None:
        """Grow `name` to `partitions` partitions (`kafka-topics --alter`); its readers'
        groups assign the new ones at their next rebalance (`rebalance`)."""
        with self._changing():
            logs = self._logs[name]
            logs.extend(PartitionLog(name, p) for p in range(len(logs), partitions))
            self._partition_counts[name] = len(logs)

    def create_topics(self, specs: Iterable[TopicSpec]) -> None:
        """Create the topics of `specs`, e.g. `topic_specs(config)`, an installation's."""
        for spec in specs:
            self.create_topic(spec.name, spec.partitions, spec.all_configs())

    def records(self, topic: str, partition: int | None = None, *,
                read_committed: bool = True) -> list[StoredRecord]:
        """What a reader from the beginning sees now, partition by partition."""
        with self._lock:
            logs = self._logs_of(topic, partition)
            return [r for log in logs for r in log.read(0, read_committed, log.end)[0]]

    def values(self, topic: str, partition: int | None = None, *,
               read_committed: bool = True) -> list[bytes]:
        """The values of `records` (tombstones left out)."""
        return [r.value for r in self.records(topic, partition, read_committed=read_committed)
                if r.value is not None]

    def committed_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        with self._lock:
            return self.groups.committed(group_id, (topic, partition))

    def inject(self, name: str, call: str, *, times: int = 1, fail: str | None = "before",
               error: BaseException | None = None,
               stall: threading.Event | None = None) -> Fault:
        """Make the next `times` calls `call` of the producers of transactional id `name`
        ("init", "send_offsets", "commit", "abort"), or of the consumers of group `name`
        ("offset_commit", "leave", the aio consumer's "fetch" and the sync consumer's
        "offset_fetch"), fail or stall; see `Fault`."""
        fault = Fault(call, times, fail, error, stall)
        with self._lock:
            self.transactions.add_fault(name, fault)
        return fault

    def fence(self, transactional_id: str) -> None:
        """A successor initialises `transactional_id`: the holder's open transaction is
        aborted and its next transactional call fails as fenced."""
        with self._changing():
            self.transactions.fence(transactional_id)

    def epoch(self, transactional_id: str) -> int | None:
        with self._lock:
            return self.transactions.epochs.get(transactional_id)

    def members(self, group_id: str) -> list[str]:
        """Member ids (`<client id>-<n>`) of the group, in join order."""
        with self._lock:
            group = self.groups.group(group_id)
            return [m.member_id for m in sorted(group.members.values(), key=lambda m: m.seq)]

    def describe_group(self, group_id: str) -> list[tuple[str, str, list[tuple[str, int]]]]:
        """(member id, client id, assigned partitions) of each member, in join order."""
        with self._lock:
            group = self.groups.group(group_id)
            return [(m.member_id, m.client_id, list(m.assignment))
                    for m in sorted(group.members.values(), key=lambda m: m.seq)]

    def expire_member(self, group_id: str, member_id: str) -> None:
        """The member's session times out: the others rebalance without it."""
        with self._changing():
            self.groups.leave(group_id, member_id)

    # -- topics and logs ---------------------------------------------------------------------
    def topic_configs(self, name: str) -> dict[str, str]:
        with self._lock:
            return dict(self._configs.get(name, {}))

    def topics(self) -> dict[str, int]:
        with self._lock:
            return dict(self._partition_counts)

    def partition_count(self, topic: str) -> int:
        with self._lock:
            if topic not in self._partition_counts:
                raise UnknownTopicError(topic)
            return self._partition_counts[topic]

    def produce(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                timestamp_ms: int | None = None, headers: tuple[tuple[str, bytes], ...] = ()
                ) -> StoredRecord:
        """Append one non-transactional record."""
        with self._changing():
            return self._log(topic, partition).append(key, value, timestamp_ms,
                                                      headers=headers)

    def fetch(self, key: Key, position: int, read_committed: bool, max_records: int
              ) -> tuple[list[StoredRecord], int, int]:
        """(records, next position, end for this isolation) of a reader at `position`."""
        with self._lock:
            if self.transactions.expire():
                self._changed()
            log = self._log(*key)
            records, position = log.read(position, read_committed, max_records)
            return records, position, log.end_for(read_committed)

    def resolve(self, group_id: str | None, key: Key, offset: int, reset: str,
                read_committed: bool) -> int:
        """A concrete position for `offset`: itself if >= 0, else the beginning, the end,
        or the group's committed offset falling back to `reset` ("earliest"/"latest")."""
        with self._lock:
            log = self._log(*key)
            if offset >= 0:
                return offset
            if offset == OFFSET_BEGINNING:
                return log.start
            if offset != OFFSET_END and group_id is not None:
                committed = self.groups.committed(group_id, key)
                if committed is not None:
                    return committed
            latest = offset == OFFSET_END or reset in ("latest", "largest", "end")
            return log.end_for(read_committed) if latest else log.start

    def end_offset(self, key: Key, read_committed: bool) -> int:
        with self._lock:
            return self._log(*key).end_for(read_committed)

    def start_offset(self, key: Key) -> int:
        """The partition's log start offset (its low watermark)."""
        with self._lock:
            return self._log(*key).start

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Delete the partition's records before offset `before`, as retention or
        DeleteRecords does on a real broker."""
        with self._changing():
            self._log(topic, partition).delete_before(before)

    def offset_for_time(self, key: Key, timestamp_ms: int, read_committed: bool) -> int:
        with self._lock:
            return self._log(*key).offset_for_time(timestamp_ms, read_committed)

    # -- groups ------------------------------------------------------------------------------
    def join(self, group_id: str, client_id: str, topics: tuple[str, ...],
             strategy: str = "range", assignor: Any = None) -> str:
        with self._changing():
            return self.groups.join(group_id, client_id, topics, strategy, assignor)

    def rebalance(self, group_id: str) -> None:
        """A member asked to rejoin: every member revokes, then the group assigns anew."""
        with self._changing():
            self.groups.rebalance(group_id)

    def assignment_of(self, group_id: str, member_id: str, partitions: tuple[Key, ...]
                      ) -> Any:
        """The member's assignment as aiokafka's `on_assignment` gets it."""
        with self._lock:
            return self.groups.assignment_of(group_id, member_id, partitions)

    def leave(self, group_id: str, member_id: str) -> None:
        with self._changing():
            self.groups.leave(group_id, member_id)

    def next_event(self, group_id: str, member_id: str) -> GroupEvent | None:
        with self._lock:
            return self.groups.next_event(group_id, member_id)

    def revoked(self, group_id: str, member_id: str) -> None:
        with self._changing():
            self.groups.revoked(group_id, member_id)

    def commit_offsets(self, group_id: str, member_id: str, generation: int,
                       offsets: dict[Key, int]) -> None:
        """A member's own offset commit (not in a transaction), refused for a stale member."""
        with self._changing():
            self.groups.check(group_id, member_id, generation)
            self.groups.commit(group_id, offsets)

    def committed(self, group_id: str, key: Key) -> int | None:
        with self._lock:
            return self.groups.committed(group_id, key)

    # -- transactions ------------------------------------------------------------------------
    def init_transactions(self, transactional_id: str) -> int:
        with self._changing():
            return self.transactions.init(transactional_id)

    def begin(self, transactional_id: str, epoch: int, timeout_s: float) -> None:
        with self._lock:
            self.transactions.begin(transactional_id, epoch, timeout_s)

    def produce_transactional(self, transactional_id: str, epoch: int, topic: str,
                              partition: int, key: bytes | None, value: bytes | None,
                              headers: tuple[tuple[str, bytes], ...] = ()) -> int:
        with self._changing():
            self._log(topic, partition)  # unknown partitions fail before the transaction
            return self.transactions.append(transactional_id, epoch, topic, partition, key,
                                            value, headers)

    def send_offsets(self, transactional_id: str, epoch: int, group_id: str,
                     offsets: dict[Key, int], member: tuple[str, int] | None = None) -> None:
        """Offsets into the transaction; with `member` (id, generation), checked against the
        group first, as KIP-447 does for confluent-kafka's consumer group metadata."""
        with self._lock:
            self.transactions.current(transactional_id, epoch)
            if member is not None:
                self.groups.check(group_id, *member)
            self.transactions.add_offsets(transactional_id, epoch, group_id, offsets)

    def end_transaction(self, transactional_id: str, epoch: int, commit: bool) -> None:
        with self._changing():
            self.transactions.end(transactional_id, epoch, commit)

    def take_fault(self, name: str | None, call: str) -> Fault | None:
        with self._lock:
            return self.transactions.take_fault(name, call)

    # -- waiting for something to happen -----------------------------------------------------
    @property
    def version(self) -> int:
        """Counts changes (records, commits, group changes), for the wait calls below."""
        with self._lock:
            return self._version

    def wait(self, since: int, timeout_s: float | None) -> None:
        """Block until something changed after `version` was `since`, or `timeout_s`."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != since, timeout_s)

    async def wait_async(self, since: int, timeout_s: float) -> None:
        """`wait` for coroutines: the event loop keeps running meanwhile."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            if self._version != since:
                return
            self._waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(waiter)

    @contextmanager
    def _changing(self) -> Iterator[None]:
        with self._lock:
            try:
                yield
            finally:
                self._changed()

    def _changed(self) -> None:
        self._version += 1
        self._cond.notify_all()
        for loop, event in list(self._waiters):
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed; its waiter is gone with it
                self._waiters.discard((loop, event))

    def _log(self, topic: str, partition: int) -> PartitionLog:
        logs = self._logs.get(topic)
        if logs is None:
            raise UnknownTopicError(topic)
        if not 0 <= partition < len(logs):
            raise UnknownPartitionError(f"{topic} has no partition {partition}")
        return logs[partition]

    def _logs_of(self, topic: str, partition: int | None) -> list[PartitionLog]:
        if partition is None:
            if topic not in self._logs:
                raise UnknownTopicError(topic)
            return self._logs[topic]
        return [self._log(topic, partition)]
