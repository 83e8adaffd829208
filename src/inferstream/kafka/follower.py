"""`TopicFollower`: a topic read from its start and then followed, on a daemon thread.

The base of the local tables a process keeps of a compacted topic (the policy, the task
controls): the reader runs on a thread of its own with a consumer from the process's
`KafkaClients` (the real broker or `inferstream.testing`) and hands every record to
`apply`, which the table implements under its own lock. It reads the topic to its end with
short fetch waits, then follows it from there with a second consumer whose fetches wait long
(`kafka.reader.FOLLOW_FETCH_WAIT_MS`: a record ends the wait at once, and an idle follower
asks the broker every few seconds, not twice a second). A read that fails is logged and
started again from the beginning a little later; `caught_up` is set once the reader reached
the end of the topic the first time.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from inferstream.config import Config
from inferstream.errors import InferstreamError
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.reader import (
    PartitionReader,
    ReadRecord,
    Tombstone,
    reader_consumer,
    topic_partitions,
)

log = logging.getLogger(__name__)

#: How long one follow round of the reader lasts before it checks for a stop.
FOLLOW_ROUND_S = 0.2
#: Wait before the reader tries again after the topic could not be read.
RETRY_S = 2.0


class TopicFollower(ABC):
    """Reads `topic` into `apply`; `start()` launches the thread, `stop()` ends it."""

    def __init__(self, config: Config, topic: str, name: str,
                 clients: KafkaClients = REAL_CLIENTS) -> None:
        self.config = config
        self.topic = topic
        self.name = name
        self.clients = clients
        self.caught_up = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def apply(self, key: bytes | None, value: bytes) -> None:
        """Take one record of the topic (an undecodable one: log it and return)."""

    def apply_record(self, record: ReadRecord) -> None:
        """Take one record with where it came from; by default, `apply` its key and value."""
        self.apply(record.key, record.value)

    def apply_tombstone(self, tombstone: Tombstone) -> None:
        """Take a record of null value (a key deleted); by default, ignore it."""
        return

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"inferstream-{self.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except (InferstreamError, OSError, RuntimeError) as exc:
                log.warning("%s: cannot read %s, retrying: %s", self.name, self.topic, exc)
                self._stop.wait(RETRY_S)
            except Exception as exc:  # librdkafka's KafkaException and friends
                log.warning("%s: read of %s failed, retrying: %r", self.name, self.topic, exc)
                self._stop.wait(RETRY_S)

    def _follow(self) -> None:
        start = self._catch_up()
        if self._stop.is_set():
            return
        consumer = reader_consumer(self.config, self.clients, follow=True)
        try:
            consumer.assign([TopicPartition(self.topic, p, offset)
                             for p, offset in start.items()])
            while not self._stop.is_set():
                self._take(PartitionReader(consumer, (), follow=True,
                                           timeout_s=FOLLOW_ROUND_S))
                self.caught_up.set()
        finally:
            consumer.close()

    def _catch_up(self) -> dict[int, int]:
        """Read the topic to its end with short fetch waits (a follower's long ones would
        hold each end of partition that long); where each partition goes on from. Sets
        `caught_up` when every end was reached (else the first follow round does)."""
        consumer = reader_consumer(self.config, self.clients)
        try:
            partitions = topic_partitions(consumer, self.topic)
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                             for p in partitions])
            first = PartitionReader(consumer, partitions, timeout_s=30.0)
            start = dict.fromkeys(partitions, OFFSET_BEGINNING)
            start.update(self._take(first))
        finally:
            consumer.close()
        if not first.waiting:
            self.caught_up.set()
        return start

    def _take(self, reader: PartitionReader) -> dict[int, int]:
        """Apply what `reader` reads; the offset after the last record of each partition."""
        after: dict[int, int] = {}
        for record in reader.with_tombstones():
            if isinstance(record, Tombstone):
                self.apply_tombstone(record)
            else:
                self.apply_record(record)
            after[record.partition] = record.offset + 1
            if self._stop.is_set():
                break
        return after
