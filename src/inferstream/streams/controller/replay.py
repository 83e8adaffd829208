"""Reading the controller's ledger back, from its start to its last committed record."""

from __future__ import annotations

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from inferstream.config import Config
from inferstream.streams.errors import KafkaSetupError, PartitionReadError
from inferstream.streams.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.streams.kafka.reader import PartitionReader, reader_consumer


def read_ledger(config: Config, topic: str, partitions: list[int],
                clients: KafkaClients = REAL_CLIENTS,
                timeout_s: float = 60.0) -> list[tuple[bytes, int]]:
    """Every committed (value, partition) of `partitions` of `topic`, in offset order each."""
    if not partitions:
        return []
    consumer = reader_consumer(config, clients)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        reader = PartitionReader(consumer, partitions, timeout_s=timeout_s)
        records = [(r.value, r.partition) for r in reader]
    except PartitionReadError as exc:
        raise KafkaSetupError(f"ledger replay failed: {exc}") from exc
    finally:
        consumer.close()
    if reader.waiting:
        raise KafkaSetupError(f"ledger replay timed out; partitions left {sorted(reader.waiting)}")
    return records
