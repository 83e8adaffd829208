"""A reader's librdkafka settings: its prefetch queue is bounded (memory of results/submit);
tombstones reach only the readers that ask for them (the ledger standby); a read error comes
after the records fetched with it; a topic refused for want of an ACL is said so."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from inferstream.kafka.errors import PartitionReadError, TopicRefusedError
from inferstream.kafka.reader import (
    FOLLOW_FETCH_WAIT_MS,
    READ_TO_END_FETCH_WAIT_MS,
    READER_PREFETCH_KB,
    PartitionReader,
    ReadRecord,
    Tombstone,
    reader_consumer,
    topic_partitions,
)
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.testing.clients.metadata import MemoryMessage
from tests.unit.support.memory import make_config


class Recording:
    """Stands in for the client factories: keeps the consumer configuration asked for."""

    def __init__(self) -> None:
        self.asked: dict[str, Any] = {}

    def consumer(self, conf: dict[str, Any]) -> Any:
        self.asked = conf
        return object()


def test_a_reader_prefetches_a_bounded_amount() -> None:
    clients = Recording()
    reader_consumer(make_config(), clients)  # type: ignore[arg-type]
    assert clients.asked["queued.max.messages.kbytes"] == READER_PREFETCH_KB <= 16384
    assert clients.asked["enable.partition.eof"] is True


def fetch_wait(follow: bool, **passed: str) -> int:
    clients = Recording()
    reader_consumer(make_config(kafka_config=tuple(passed.items())), clients,  # type: ignore[arg-type]
                    follow=follow)
    return int(clients.asked["fetch.wait.max.ms"])


def test_a_reader_to_the_end_waits_briefly_and_a_follower_long_within_the_socket_timeout(
        ) -> None:
    assert fetch_wait(False) == READ_TO_END_FETCH_WAIT_MS
    assert fetch_wait(True) == FOLLOW_FETCH_WAIT_MS > 500  # librdkafka's default
    # librdkafka warns unless a fetch's wait is a second under the socket timeout
    assert fetch_wait(True, **{"socket.timeout.ms": "3000"}) == 2000
    assert fetch_wait(True, **{"socket.timeout.ms": "800"}) == READ_TO_END_FETCH_WAIT_MS
    assert fetch_wait(True, **{"fetch.wait.max.ms": "100"}) == 100  # the user's own
    assert fetch_wait(False, **{"fetch.wait.max.ms": "100"}) == 100


def test_a_reader_gives_tombstones_only_to_whoever_asks_for_them(
        broker: MemoryBroker, clients: MemoryKafkaClients) -> None:
    broker.create_topic("t.table", 1)
    broker.produce("t.table", 0, b"a", b"1")
    broker.produce("t.table", 0, b"a", None)  # "a" deleted
    broker.produce("t.table", 0, b"b", b"2")

    def read(tombstones: bool) -> list[ReadRecord | Tombstone]:
        consumer = reader_consumer(make_config(), clients)
        consumer.assign([TopicPartition("t.table", 0, OFFSET_BEGINNING)])
        reader = PartitionReader(consumer, [0], timeout_s=10)
        return list(reader.with_tombstones() if tombstones else reader)

    assert read(tombstones=False) == [ReadRecord(0, 0, b"1", b"a"), ReadRecord(0, 2, b"2", b"b")]
    assert read(tombstones=True) == [ReadRecord(0, 0, b"1", b"a"), Tombstone(0, 1, b"a"),
                                     ReadRecord(0, 2, b"2", b"b")]


def _record(offset: int) -> MemoryMessage:
    return MemoryMessage("t.results", 0, offset, value=b"v%d" % offset)


class _OneBatch:
    """A consumer that fetches one batch: a record, a read error, two more records."""

    def __init__(self) -> None:
        failed = MemoryMessage("t.results", 0, -1, error=KafkaError(KafkaError._TRANSPORT))
        self.batches = [[_record(0), failed, _record(1), _record(2)]]

    def poll(self, timeout: float) -> MemoryMessage | None:
        return self.batches[0].pop(0) if self.batches else None

    def consume(self, num_messages: int, timeout: float) -> list[MemoryMessage]:
        return self.batches.pop(0) if self.batches else []


def test_a_read_error_comes_after_the_records_fetched_with_it() -> None:
    """A caller that reads on after the error (the consumer is past the batch) loses none."""
    read: list[int] = []
    reader = PartitionReader(_OneBatch(), [0], follow=True)  # type: ignore[arg-type]
    with pytest.raises(PartitionReadError, match=r"read of t\.results failed"):
        for record in reader:
            read.append(record.offset)
    assert read == [0, 1, 2]


class _RefusedRead:
    """A fetch the broker refused: no ACL lets this principal read the topic."""

    def poll(self, timeout: float) -> MemoryMessage:
        return MemoryMessage("t.ledger", 0, -1,
                             error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    def consume(self, num_messages: int, timeout: float) -> list[MemoryMessage]:
        return []


def test_a_read_refused_for_want_of_an_acl_says_so() -> None:
    """Not a read error to retry (a controller rebuilding its state retried it for ever)."""
    reader = PartitionReader(_RefusedRead(), [0], follow=True)  # type: ignore[arg-type]
    with pytest.raises(TopicRefusedError) as raised:
        list(reader)
    assert (raised.value.topic, raised.value.what) == ("t.ledger", "read")


class _RefusedMetadata:
    """A broker's answer to a metadata request naming a topic this principal may not see."""

    def list_topics(self, topic: str, timeout: float) -> Any:
        error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
        return SimpleNamespace(topics={topic: SimpleNamespace(error=error, partitions={})})


def test_a_topic_refused_for_want_of_an_acl_is_not_called_missing() -> None:
    with pytest.raises(TopicRefusedError) as raised:
        topic_partitions(_RefusedMetadata(), "t.ledger")  # type: ignore[arg-type]
    assert (raised.value.topic, raised.value.what) == ("t.ledger", "describe")
