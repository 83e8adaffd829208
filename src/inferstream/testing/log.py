"""Partition logs of the in-memory broker: records, transaction markers, what a reader sees.

A transactional record is in the log from the moment it is produced, like on a real broker:
a `read_committed` reader stops at the first record of a transaction still open (the last
stable offset) and skips aborted records; a `read_uncommitted` reader sees everything.
Commit and abort markers take an offset each and are never handed to a reader.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

OPEN, COMMITTED, ABORTED = "open", "committed", "aborted"

#: (topic, partition): how the broker names a partition.
Key = tuple[str, int]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class Transaction:
    """One transaction of one producer epoch: where it wrote, what offsets it carries."""

    transactional_id: str
    epoch: int
    timeout_s: float
    state: str = OPEN
    partitions: set[Key] = field(default_factory=set)
    offsets: dict[str, dict[Key, int]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class StoredRecord:
    """A record as the broker holds it; `txn` is None for a non-transactional record."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    txn: Transaction | None = None
    control: bool = False
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def state(self) -> str:
        """Transactional state: committed for non-transactional records."""
        return COMMITTED if self.txn is None else self.txn.state


class PartitionLog:
    """The records of one partition, in offset order from 0; those before `start` are
    deleted (as retention or DeleteRecords deletes them) and no reader gets them."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.records: list[StoredRecord] = []
        #: the log start offset (the low watermark): the first offset not deleted
        self.start = 0
        self._open: dict[Transaction, int] = {}  # open transaction -> its first offset here

    @property
    def end(self) -> int:
        """The high watermark: the offset the next record gets."""
        return len(self.records)

    @property
    def stable_end(self) -> int:
        """The last stable offset: the first offset of a transaction still open, else end."""
        return min(self._open.values(), default=self.end)

    def end_for(self, read_committed: bool) -> int:
        return self.stable_end if read_committed else self.end

    def append(self, key: bytes | None, value: bytes | None, timestamp_ms: int | None = None,
               txn: Transaction | None = None, headers: tuple[tuple[str, bytes], ...] = ()
               ) -> StoredRecord:
        record = StoredRecord(self.topic, self.partition, self.end, key, value,
                              timestamp_ms if timestamp_ms is not None else now_ms(), txn,
                              headers=headers)
        self.records.append(record)
        if txn is not None:
            self._open.setdefault(txn, record.offset)
        return record

    def end_transaction(self, txn: Transaction) -> None:
        """Write `txn`'s commit or abort marker (its state is already final)."""
        self._open.pop(txn, None)
        self.records.append(StoredRecord(self.topic, self.partition, self.end, None, None,
                                         now_ms(), txn, control=True))

    def delete_before(self, offset: int) -> None:
        """Delete the records before `offset` (at most the end), as DeleteRecords does."""
        self.start = max(self.start, min(offset, self.end))

    def read(self, position: int, read_committed: bool, max_records: int
             ) -> tuple[list[StoredRecord], int]:
        """Up to `max_records` records a reader at `position` gets, and its next position; a
        position before `start` reads from `start` (a reset to the earliest offset)."""
        limit = self.end_for(read_committed)
        position = max(position, self.start)
        out: list[StoredRecord] = []
        while position < limit and len(out) < max_records:
            record = self.records[position]
            position += 1
            if record.control or (read_committed and record.state == ABORTED):
                continue
            out.append(record)
        return out, position

    def offset_for_time(self, timestamp_ms: int, read_committed: bool) -> int:
        """The first offset whose record has a timestamp at or after `timestamp_ms`, else -1."""
        for record in self.records[self.start: self.end_for(read_committed)]:
            if not record.control and record.timestamp_ms >= timestamp_ms:
                return record.offset
        return -1
