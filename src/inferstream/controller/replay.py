"""Reading the controller's ledger back, from its start (or from what a standby copy holds) to
its last committed record."""

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


def read_ledger(config: Config, topic: str, partitions: list[int],
                clients: KafkaClients = REAL_CLIENTS, timeout_s: float = 60.0,
                start: dict[int, int] | None = None) -> list[tuple[bytes, int]]:
    """Every committed (value, partition) of `partitions` of `topic`, in offset order each,
    from the beginning or, for a partition in `start`, from that offset."""
    if not partitions:
        return []
    start = start or {}
    consumer = reader_consumer(config, clients)
    try:
        topic_partitions(consumer, topic)  # the leaders known before the first fetch
        consumer.assign([TopicPartition(topic, p, start.get(p, OFFSET_BEGINNING))
                         for p in partitions])
        reader = PartitionReader(consumer, partitions, timeout_s=timeout_s)
        records = [(r.value, r.partition) for r in reader]
    except PartitionReadError as exc:
        raise KafkaSetupError(f"ledger replay failed: {exc}") from exc
    finally:
        consumer.close()
    if reader.waiting:
        raise KafkaSetupError(f"ledger replay timed out; partitions left {sorted(reader.waiting)}")
    return records


class LedgerStandby(TopicFollower):
    """Every partition of the ledger, followed on a thread of its own: the warm copy from
    which a replica that is assigned a partition rebuilds its jobs, reading only what was
    written since (`records`). It keeps the latest value per key, in the order written, and
    drops a key at its tombstone (the task entries of a job that ended), as compaction
    does."""

    def __init__(self, config: Config, topic: str, clients: KafkaClients = REAL_CLIENTS) -> None:
        super().__init__(config, topic, "ledger-standby", clients)
        self._values: dict[int, dict[bytes, bytes]] = {}
        self._next: dict[int, int] = {}
        self._lock = threading.Lock()

    def apply(self, key: bytes | None, value: bytes) -> None:  # pragma: no cover - unused
        raise NotImplementedError("the standby takes records with their offsets")

    def apply_record(self, record: ReadRecord) -> None:
        key = record.key if record.key is not None else b"@%d" % record.offset
        with self._lock:
            values = self._values.setdefault(record.partition, {})
            values.pop(key, None)  # the latest of a key goes last, as compaction keeps it
            values[key] = record.value
            self._next[record.partition] = record.offset + 1

    def apply_tombstone(self, tombstone: Tombstone) -> None:
        with self._lock:
            self._values.get(tombstone.partition, {}).pop(tombstone.key or b"", None)
            self._next[tombstone.partition] = tombstone.offset + 1

    def held(self) -> int:
        """How many entries the copy holds, every partition together."""
        with self._lock:
            return sum(map(len, self._values.values()))

    def records(self, partitions: list[int]) -> tuple[list[tuple[bytes, int]], dict[int, int]]:
        """The (value, partition) records held for `partitions`, and the offset of each
        partition from which the ledger must still be read; nothing before the first
        catch-up (then a rebuild reads everything)."""
        if not self.caught_up.is_set():
            return [], {}
        with self._lock:
            held = [(value, p) for p in partitions for value in self._values.get(p, {}).values()]
            return held, {p: self._next[p] for p in partitions if p in self._next}
