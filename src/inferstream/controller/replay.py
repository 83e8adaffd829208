"""Reading the controller's ledger back, from its start (or from what a standby copy holds) to
its last committed record, as compaction leaves it."""

from __future__ import annotations

import threading

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.errors import KafkaSetupError, PartitionReadError
from inferstream.kafka.follower import TopicFollower
from inferstream.kafka.reader import (
    PartitionReader,
    ReadRecord,
    Tombstone,
    reader_consumer,
    topic_partitions,
)


class LatestValues:
    """The latest value of each key of some partitions of a topic, in the order written, less
    the keys deleted since (tombstones): what compaction leaves of them, whether it ran yet or
    not. Not thread-safe."""

    def __init__(self, values: dict[int, dict[bytes, bytes]] | None = None) -> None:
        self._values = values if values is not None else {}

    def take(self, record: ReadRecord | Tombstone) -> None:
        values = self._values.setdefault(record.partition, {})
        key = record.key if record.key is not None else b"@%d" % record.offset
        values.pop(key, None)  # the latest of a key goes last, as compaction keeps it
        if isinstance(record, ReadRecord):
            values[key] = record.value

    def copy(self, partitions: list[int]) -> LatestValues:
        return LatestValues({p: dict(self._values[p]) for p in partitions if p in self._values})

    def records(self, partitions: list[int]) -> list[tuple[bytes, int]]:
        """The (value, partition) of each key of `partitions` held, in the order written."""
        return [(value, p) for p in partitions for value in self._values.get(p, {}).values()]

    def __len__(self) -> int:
        return sum(map(len, self._values.values()))


def read_ledger(config: Config, topic: str, partitions: list[int],
                clients: KafkaClients = REAL_CLIENTS, timeout_s: float = 60.0,
                start: dict[int, int] | None = None,
                onto: LatestValues | None = None) -> list[tuple[bytes, int]]:
    """The committed (value, partition) records of `partitions` of `topic` as compaction
    leaves them (`LatestValues`), read from the beginning or, for a partition in `start`,
    from that offset on top of `onto` (a standby's copy of what came before)."""
    if not partitions:
        return []
    latest = onto if onto is not None else LatestValues()
    start = start or {}
    consumer = reader_consumer(config, clients)
    try:
        topic_partitions(consumer, topic)  # the leaders known before the first fetch
        consumer.assign([TopicPartition(topic, p, start.get(p, OFFSET_BEGINNING))
                         for p in partitions])
        reader = PartitionReader(consumer, partitions, timeout_s=timeout_s)
        for record in reader.with_tombstones():
            latest.take(record)
    except PartitionReadError as exc:
        raise KafkaSetupError(f"ledger replay failed: {exc}") from exc
    finally:
        consumer.close()
    if reader.waiting:
        raise KafkaSetupError(f"ledger replay timed out; partitions left {sorted(reader.waiting)}")
    return latest.records(partitions)


class LedgerStandby(TopicFollower):
    """Every partition of the ledger, followed on a thread of its own: the warm copy from
    which a replica that is assigned a partition rebuilds its jobs, reading only what was
    written since (`copy`). It keeps what compaction leaves (`LatestValues`): a key goes at
    its tombstone (the task entries of a job that ended)."""

    def __init__(self, config: Config, topic: str, clients: KafkaClients = REAL_CLIENTS) -> None:
        super().__init__(config, topic, "ledger-standby", clients)
        self._latest = LatestValues()
        self._next: dict[int, int] = {}
        self._lock = threading.Lock()

    def apply(self, key: bytes | None, value: bytes) -> None:  # pragma: no cover - unused
        raise NotImplementedError("the standby takes records with their offsets")

    def apply_record(self, record: ReadRecord) -> None:
        self._hold(record)

    def apply_tombstone(self, tombstone: Tombstone) -> None:
        self._hold(tombstone)

    def _hold(self, record: ReadRecord | Tombstone) -> None:
        with self._lock:
            self._latest.take(record)
            self._next[record.partition] = record.offset + 1

    def held(self) -> int:
        """How many entries the copy holds, every partition together."""
        with self._lock:
            return len(self._latest)

    def copy(self, partitions: list[int]) -> tuple[LatestValues, dict[int, int]]:
        """A copy of what it holds of `partitions`, and the offset of each partition from
        which the ledger must still be read (`read_ledger(start=..., onto=...)`); nothing
        before the first catch-up (then a rebuild reads everything)."""
        if not self.caught_up.is_set():
            return LatestValues(), {}
        with self._lock:
            return (self._latest.copy(partitions),
                    {p: self._next[p] for p in partitions if p in self._next})
