"""The in-memory transport behaves as Kafka does where inferstream relies on it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaTimeoutError, ProducerFenced
from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, KafkaError, KafkaException
from confluent_kafka import TopicPartition as SyncTopicPartition

from inferstream.kafka.settings import PARTITION_EOF
from inferstream.testing import MemoryBroker, MemoryKafkaClients

READ_COMMITTED = {"group.id": "readers", "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest"}
READ_UNCOMMITTED = {**READ_COMMITTED, "isolation.level": "read_uncommitted"}


@pytest.fixture
def broker() -> MemoryBroker:
    """The tests' own topics, and only those: `in` (2 partitions) and `out`."""
    broker = MemoryBroker()
    broker.create_topic("in", 2)
    broker.create_topic("out", 1)
    return broker


def read_all(clients: MemoryKafkaClients, topic: str, settings: dict[str, Any],
             partitions: int = 1) -> list[bytes]:
    """Every value a fresh reader gets, read to the end of each partition."""
    consumer = clients.consumer({**settings, "enable.partition.eof": True})
    consumer.assign([SyncTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[bytes] = []
    ends = 0
    while ends < partitions:
        for message in consumer.consume(100, timeout=1):
            error = message.error()
            if error is not None and error.code() == PARTITION_EOF:
                ends += 1
            elif error is None:
                values.append(message.value() or b"")
    consumer.close()
    return values


def transactional(clients: MemoryKafkaClients, tid: str = "tx") -> Any:
    producer = clients.producer({"transactional.id": tid})
    producer.init_transactions(1)
    producer.begin_transaction()
    return producer


def test_read_committed_sees_a_transaction_only_once_committed(
        clients: MemoryKafkaClients) -> None:
    plain = clients.producer({})
    plain.produce("out", b"before", partition=0)
    producer = transactional(clients)
    producer.produce("out", b"in-txn", partition=0)
    plain.produce("out", b"after", partition=0)  # behind the open transaction: not stable

    assert read_all(clients, "out", READ_COMMITTED) == [b"before"]
    assert read_all(clients, "out", READ_UNCOMMITTED) == [b"before", b"in-txn", b"after"]

    producer.commit_transaction(1)
    assert read_all(clients, "out", READ_COMMITTED) == [b"before", b"in-txn", b"after"]
    # the commit marker takes an offset; readers never see it
    assert [r.offset for r in clients.broker.records("out")] == [0, 1, 2]
    consumer = clients.consumer(READ_COMMITTED)
    assert consumer.get_watermark_offsets(SyncTopicPartition("out", 0)) == (0, 4)


def test_abort_discards_records_and_offsets(clients: MemoryKafkaClients) -> None:
    producer = transactional(clients)
    producer.produce("out", b"doomed", partition=0)
    group = clients.consumer({"group.id": "g"})
    producer.send_offsets_to_transaction([SyncTopicPartition("in", 0, 5)],
                                         group.consumer_group_metadata(), 1)
    producer.abort_transaction(1)

    assert read_all(clients, "out", READ_COMMITTED) == []
    assert read_all(clients, "out", READ_UNCOMMITTED) == [b"doomed"]
    assert clients.broker.committed_offset("g", "in", 0) is None
    assert group.committed([SyncTopicPartition("in", 0)])[0].offset == OFFSET_INVALID


def test_offsets_and_records_commit_together(clients: MemoryKafkaClients) -> None:
    async def scenario() -> None:
        producer = clients.aio_producer({"transactional_id": "w.in.0"})
        await producer.start()
        async with producer.transaction():
            await producer.send("out", b"result", partition=0)
            assert clients.broker.committed_offset("workers", "in", 0) is None
            await producer.send_offsets_to_transaction({TopicPartition("in", 0): 7}, "workers")
        consumer = clients.aio_consumer({"group_id": "workers"})
        assert await consumer.committed(TopicPartition("in", 0)) == 7

    asyncio.run(scenario())
    assert clients.broker.values("out") == [b"result"]


def test_a_new_epoch_fences_the_old_producer_and_aborts_its_transaction(
        clients: MemoryKafkaClients) -> None:
    async def scenario() -> None:
        old = clients.aio_producer({"transactional_id": "w.in.0"})
        await old.start()
        await old.begin_transaction()
        await old.send("out", b"zombie", partition=0)
        successor = clients.aio_producer({"transactional_id": "w.in.0"})
        await successor.start()  # init_transactions: epoch + 1
        with pytest.raises(ProducerFenced):
            await old.commit_transaction()
        with pytest.raises(ProducerFenced):  # fenced for good
            await old.begin_transaction()
        async with successor.transaction():
            await successor.send("out", b"successor", partition=0)

    asyncio.run(scenario())
    assert clients.broker.values("out") == [b"successor"]
    assert clients.broker.epoch("w.in.0") == 1


def test_a_fenced_confluent_producer_gets_a_fatal_error(clients: MemoryKafkaClients) -> None:
    old = transactional(clients, "ctl")
    old.produce("out", b"zombie", partition=0)
    clients.broker.fence("ctl")
    with pytest.raises(KafkaException) as caught:
        old.commit_transaction(1)
    error = caught.value.args[0]
    assert error.fatal() and error.code() == KafkaError._FENCED
    assert read_all(clients, "out", READ_COMMITTED) == []


def test_a_commit_can_fail_after_taking_effect(clients: MemoryKafkaClients) -> None:
    clients.broker.inject("ctl", "commit", fail="after")
    producer = transactional(clients, "ctl")
    producer.produce("out", b"maybe", partition=0)
    with pytest.raises(KafkaException) as caught:
        producer.commit_transaction(1)
    assert caught.value.args[0].code() == KafkaError._TIMED_OUT
    assert read_all(clients, "out", READ_COMMITTED) == [b"maybe"]


def test_a_failed_commit_leaves_the_transaction_to_abort(clients: MemoryKafkaClients) -> None:
    async def scenario() -> None:
        clients.broker.inject("w", "commit", times=1)
        producer = clients.aio_producer({"transactional_id": "w"})
        await producer.start()
        with pytest.raises(KafkaTimeoutError):
            async with producer.transaction():
                await producer.send("out", b"lost", partition=0)
        await producer.abort_transaction()
        async with producer.transaction():  # the fault was for one commit only
            await producer.send("out", b"kept", partition=0)

    asyncio.run(scenario())
    assert clients.broker.values("out") == [b"kept"]


def test_confluent_offsets_carry_the_group_generation(clients: MemoryKafkaClients) -> None:
    """KIP-447: a zombie that missed a rebalance cannot commit its offsets."""
    first = clients.consumer({"group.id": "ctl"})
    first.subscribe(["in"])
    first.consume(1, timeout=0)
    stale = first.consumer_group_metadata()
    second = clients.consumer({"group.id": "ctl"})
    second.subscribe(["in"])
    first.consume(1, timeout=0)  # revokes
    second.consume(1, timeout=0)  # the group completes the rebalance without waiting more
    producer = transactional(clients, "ctl")
    with pytest.raises(KafkaException) as caught:
        producer.send_offsets_to_transaction([SyncTopicPartition("in", 0, 3)], stale, 1)
    assert caught.value.args[0].txn_requires_abort()


class Recorder(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.log.append(f"{self.name} revoked {sorted(tp.partition for tp in revoked)}")

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.log.append(f"{self.name} assigned {sorted(tp.partition for tp in assigned)}")


def test_a_join_revokes_everything_before_the_new_assignment(
        clients: MemoryKafkaClients) -> None:
    async def scenario() -> list[str]:
        log: list[str] = []
        a = clients.aio_consumer({"group_id": "pool", "client_id": "a"})
        a.subscribe(["in"], listener=Recorder("a", log))
        await a.start()
        await a.getmany(timeout_ms=0)
        b = clients.aio_consumer({"group_id": "pool", "client_id": "b"})
        b.subscribe(["in"], listener=Recorder("b", log))
        await b.start()
        await b.getmany(timeout_ms=0)  # waits for a to revoke: no assignment yet
        assert b.assignment() == set()
        await a.getmany(timeout_ms=0)
        await b.getmany(timeout_ms=0)
        clients.broker.expire_member("pool", clients.broker.members("pool")[1])
        await a.getmany(timeout_ms=0)
        return log

    assert asyncio.run(scenario()) == [
        "a revoked []", "a assigned [0, 1]",
        "b revoked []",
        "a revoked [0, 1]", "a assigned [0]", "b assigned [1]",
        "a revoked [0]", "a assigned [0, 1]",
    ]


def test_an_expired_member_cannot_commit_and_rejoins(clients: MemoryKafkaClients) -> None:
    async def scenario() -> None:
        consumer = clients.aio_consumer({"group_id": "pool", "client_id": "w"})
        consumer.subscribe(["in"])
        await consumer.start()
        await consumer.getmany(timeout_ms=0)
        tp = TopicPartition("in", 0)
        await consumer.commit({tp: 1})
        clients.broker.expire_member("pool", "w-1")
        with pytest.raises(CommitFailedError):
            await consumer.commit({tp: 2})
        await consumer.getmany(timeout_ms=0)
        assert clients.broker.members("pool") == ["w-2"]
        await consumer.commit({tp: 3})

    asyncio.run(scenario())
    assert clients.broker.committed_offset("pool", "in", 0) == 3


def test_confluent_callbacks_see_revoke_then_assign(clients: MemoryKafkaClients) -> None:
    log: list[str] = []

    def subscribe(name: str) -> Any:
        def note(sign: str) -> Any:
            return lambda _c, tps: log.append(
                f"{name} {sign}{[(t.topic, t.partition) for t in tps]}")

        consumer = clients.consumer({"group.id": "ctl", "client.id": name})
        consumer.subscribe(["in", "out"], on_assign=note("+"), on_revoke=note("-"))
        return consumer

    first = subscribe("a")
    first.consume(1, timeout=0)
    second = subscribe("b")
    first.consume(1, timeout=0)
    second.consume(1, timeout=0)
    first.consume(1, timeout=0)
    second.close()
    first.consume(1, timeout=0)
    assert log == [
        "a +[('in', 0), ('in', 1), ('out', 0)]",
        "a -[('in', 0), ('in', 1), ('out', 0)]",
        "b +[('in', 1)]", "a +[('in', 0), ('out', 0)]",  # range: per topic, in join order
        "b -[('in', 1)]",  # close revokes
        "a -[('in', 0), ('out', 0)]", "a +[('in', 0), ('in', 1), ('out', 0)]",
    ]


def test_a_group_consumer_starts_at_the_committed_offset(clients: MemoryKafkaClients) -> None:
    producer = clients.producer({})
    for value in (b"a", b"b", b"c"):
        producer.produce("out", value, partition=0)
    async def commit() -> None:
        writer = clients.aio_producer({"transactional_id": "x"})
        await writer.start()
        async with writer.transaction():
            await writer.send_offsets_to_transaction({TopicPartition("out", 0): 2}, "ctl")
    asyncio.run(commit())
    consumer = clients.consumer({"group.id": "ctl", "auto.offset.reset": "earliest"})
    consumer.subscribe(["out"])
    assert [m.value() for m in consumer.consume(10, timeout=1)] == [b"c"]
    assert consumer.position([SyncTopicPartition("out", 0)])[0].offset == 3


def test_offsets_for_times_and_end_of_partition(clients: MemoryKafkaClients) -> None:
    for ts in (100, 200, 300):
        clients.broker.produce("out", 0, None, str(ts).encode(), timestamp_ms=ts)
    consumer = clients.consumer(READ_COMMITTED)
    found = consumer.offsets_for_times([SyncTopicPartition("out", 0, 150),
                                        SyncTopicPartition("out", 0, 999)], timeout=1)
    assert [tp.offset for tp in found] == [1, -1]
    assert sorted(consumer.list_topics(timeout=1).topics) == ["in", "out"]
    assert consumer.list_topics("nope", timeout=1).topics["nope"].error is not None


def test_consume_returns_as_soon_as_a_record_arrives(clients: MemoryKafkaClients) -> None:
    consumer = clients.consumer(READ_COMMITTED)
    consumer.assign([SyncTopicPartition("out", 0, OFFSET_BEGINNING)])
    later = threading.Timer(0.05, clients.broker.produce, ("out", 0, None, b"late"))
    later.start()
    messages = consumer.consume(10, timeout=30)
    later.join()
    assert [m.value() for m in messages] == [b"late"]

    async def aio() -> list[Any]:
        reader = clients.aio_consumer({"group_id": "g", "auto_offset_reset": "earliest"})
        reader.subscribe(["out"])
        await reader.start()
        first = await reader.getmany(timeout_ms=0)
        asyncio.get_running_loop().call_later(
            0.05, clients.broker.produce, "out", 0, None, b"later")
        second = await reader.getmany(timeout_ms=30_000)
        return [r.value for got in (first, second) for rs in got.values() for r in rs]

    assert asyncio.run(aio()) == [b"late", b"later"]
