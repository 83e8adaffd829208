"""Reading a compacted state topic back, from its start to its last committed record."""

from __future__ import annotations

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from inferstream.config import Config
from inferstream.streams.errors import KafkaSetupError
from inferstream.streams.kafka import PARTITION_EOF, consumer_config


def read_ledger(config: Config, topic: str, partitions: list[int],
                timeout_s: float = 60.0) -> list[tuple[bytes, int]]:
    """Every committed (value, partition) of `partitions` of `topic`, in offset order each."""
    if not partitions:
        return []
    consumer = Consumer(consumer_config(config, None, **{"enable.partition.eof": True}))
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        return _drain(consumer, set(partitions), timeout_s)
    finally:
        consumer.close()


def _drain(consumer: Consumer, waiting: set[int], timeout_s: float) -> list[tuple[bytes, int]]:
    import time

    records: list[tuple[bytes, int]] = []
    deadline = time.monotonic() + timeout_s
    while waiting:
        if time.monotonic() > deadline:
            raise KafkaSetupError(f"ledger replay timed out; partitions left {sorted(waiting)}")
        for message in consumer.consume(num_messages=1000, timeout=0.5):
            error = message.error()
            if error is not None and error.code() == PARTITION_EOF:
                waiting.discard(message.partition())
            elif error is not None:
                raise KafkaSetupError(f"ledger replay failed: {error}")
            else:
                value = message.value()
                if value is not None:  # None: a tombstone
                    records.append((value, message.partition() or 0))
    return records
