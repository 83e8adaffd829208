"""The one partition reader: committed records of assigned partitions, to their end or on.

Every place that reads a topic back (the ledger replay, a job's results and events, the job
listing) reads through `PartitionReader`, from a consumer made by `reader_consumer`: no
group, `read_committed`, end-of-partition events on.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from inferstream.config import Config
from inferstream.streams.errors import PartitionReadError
from inferstream.streams.kafka.clients import REAL_CLIENTS, KafkaClients, SyncConsumer
from inferstream.streams.kafka.settings import PARTITION_EOF, consumer_config


def reader_consumer(config: Config, clients: KafkaClients = REAL_CLIENTS) -> SyncConsumer:
    """A consumer outside any group that reports reaching the end of each partition."""
    return clients.consumer(consumer_config(config, None, **{"enable.partition.eof": True}))


@dataclass(frozen=True)
class ReadRecord:
    partition: int
    offset: int
    value: bytes


class PartitionReader:
    """Iterates the records of `partitions` (already assigned to `consumer`), in offset
    order within each partition, tombstones skipped.

    Stops once every partition reached its end, or with `follow` keeps waiting for new
    records; either way stops at `timeout_s`. After the loop, `waiting` names the
    partitions whose end was not reached. A read error is a PartitionReadError.
    """

    def __init__(self, consumer: SyncConsumer, partitions: Iterable[int], *,
                 follow: bool = False, timeout_s: float | None = None) -> None:
        self.consumer = consumer
        self.waiting = set(partitions)
        self.follow = follow
        self.timeout_s = timeout_s

    def __iter__(self) -> Iterator[ReadRecord]:
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while (self.follow or self.waiting) and (
                deadline is None or time.monotonic() < deadline):
            for message in self.consumer.consume(num_messages=1000, timeout=0.2):
                error = message.error()
                if error is not None and error.code() == PARTITION_EOF:
                    self.waiting.discard(message.partition() or 0)
                elif error is not None:
                    raise PartitionReadError(f"read of {message.topic()} failed: {error}")
                else:
                    value = message.value()
                    if value is not None:
                        yield ReadRecord(message.partition() or 0, message.offset() or 0, value)
