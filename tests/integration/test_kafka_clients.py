"""The two Kafka clients against a real broker: every schema, transactions, the partitioner.

Workers use aiokafka, the controller and the SDK confluent-kafka (DESIGN.md "Kafka clients"), so
records written by either must read back equal through the other; both must honour
`read_committed`; and a keyed record must land where `partition_for` says, whichever client
(aiokafka, confluent-kafka, or the Java client that other producers may use) wrote it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.partitioner import DefaultPartitioner
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from inferstream.config import Config
from inferstream.kafka.settings import (
    LIBRDKAFKA_LOG,
    aiokafka_kwargs,
    consumer_config,
    partition_for,
    producer_config,
)
from inferstream.schemas import SCHEMA_NAMES, Codec
from tests.integration.conftest import CLUSTER
from tests.unit.examples import EXAMPLES

pytestmark = pytest.mark.integration

CLIENTS = ("confluent", "aiokafka")
READ_DEADLINE_S = 60.0


@dataclass(frozen=True)
class Record:
    topic: str
    key: str
    value: bytes
    partition: int = -1  # as read back; -1 when produced without an explicit partition


def schema_topics(config: Config) -> dict[str, str]:
    """Each schema's records go to the topic that carries them in production."""
    return {
        "Job": config.topic("jobs"),
        "Task": config.task_topic(),
        "TaskResult": config.topic("results"),
        "TaskDeclined": config.topic("results"),  # beside the results it stands in for
        "ResultChunk": config.topic("results"),  # a piece of a result too large for a record
        "JobEvent": config.topic("job-events"),
        "SysInfoSample": config.topic("sysinfo"),
        "PolicyEntry": config.topic("policy"),  # compacted: records need keys
        "DeadLetter": config.topic("dlq"),
        "LedgerEntry": config.topic("controller-ledger"),  # compacted
        "TaskControl": config.topic("task-control"),  # compacted; also on jobs (a cancel)
        "StreamResult": config.topic("stream-out"),  # a user's topic: the test creates it
        "WorkerAnnouncement": config.topic("workers"),  # compacted
    }


def create_topic(config: Config, topic: str, partitions: int) -> None:
    admin = AdminClient(config.confluent_config(logger=LIBRDKAFKA_LOG))
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        future.result(60)


def partitions_of(config: Config, topic: str) -> int:
    admin = AdminClient(config.confluent_config(logger=LIBRDKAFKA_LOG))
    return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)


# -- producing ----------------------------------------------------------------------------------
def confluent_produce(config: Config, records: list[Record], **extra: object) -> list[int]:
    """Produce with confluent-kafka (idempotent, acks=all); returns the partitions written."""
    producer = Producer(producer_config(config, **extra))
    delivered: list[int] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg.partition())  # type: ignore[attr-defined]

    for r in records:
        where = {"partition": r.partition} if r.partition >= 0 else {}
        producer.produce(r.topic, r.value, r.key, on_delivery=on_delivery, **where)
    assert producer.flush(60) == 0, "records still queued after 60 s"
    assert not errors, errors
    return delivered


async def aiokafka_produce(config: Config, records: list[Record]) -> list[int]:
    producer = AIOKafkaProducer(**aiokafka_kwargs(config, AIOKafkaProducer, acks="all",
                                                  enable_idempotence=True))
    await producer.start()
    try:
        sent = []
        for r in records:
            partition = r.partition if r.partition >= 0 else None
            meta = await producer.send_and_wait(r.topic, r.value, key=r.key.encode(),
                                                partition=partition)
            sent.append(meta.partition)
        return sent
    finally:
        await producer.stop()


def produce(client: str, config: Config, records: list[Record]) -> list[int]:
    if client == "confluent":
        return confluent_produce(config, records)
    return asyncio.run(aiokafka_produce(config, records))


# -- consuming: every record of the topics, from the beginning to the end ---------------------
def confluent_read(config: Config, topics: list[str], isolation: str) -> list[Record]:
    consumer = Consumer(consumer_config(config, None, **{
        "isolation.level": isolation, "enable.partition.eof": True}))
    assigned = [TopicPartition(t, p, OFFSET_BEGINNING)
                for t in topics for p in range(partitions_of(config, t))]
    consumer.assign(assigned)
    at_end: set[tuple[str, int]] = set()
    records: list[Record] = []
    deadline = time.monotonic() + READ_DEADLINE_S
    try:
        while len(at_end) < len(assigned):
            assert time.monotonic() < deadline, f"not at the end of {topics} in time"
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                # read_committed reaches "end" at the last stable offset: no open transaction
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add((msg.topic(), msg.partition()))
                continue
            records.append(Record(msg.topic(), msg.key().decode(), msg.value(), msg.partition()))
    finally:
        consumer.close()
    return records


async def _aiokafka_read(config: Config, topics: list[str], isolation: str) -> list[Record]:
    consumer = AIOKafkaConsumer(**aiokafka_kwargs(
        config, AIOKafkaConsumer, group_id=None, enable_auto_commit=False,
        isolation_level=isolation))
    await consumer.start()
    try:
        assigned = [AioTopicPartition(t, p)
                    for t in topics for p in range(partitions_of(config, t))]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        end = await consumer.end_offsets(assigned)
        records: list[Record] = []
        deadline = time.monotonic() + READ_DEADLINE_S
        while any([await consumer.position(tp) < end[tp] for tp in assigned]):
            assert time.monotonic() < deadline, f"not at the end of {topics} in time"
            batches = await consumer.getmany(timeout_ms=1000)
            for tp, msgs in batches.items():
                records.extend(Record(tp.topic, m.key.decode(), m.value, tp.partition)
                               for m in msgs)
        return records
    finally:
        await consumer.stop()


def read_all(client: str, config: Config, topics: list[str],
             isolation: str = "read_committed") -> list[Record]:
    if client == "confluent":
        return confluent_read(config, topics, isolation)
    return asyncio.run(_aiokafka_read(config, topics, isolation))


# -- every schema through every pair of clients -------------------------------------------------
@pytest.mark.timeout(180)
@pytest.mark.parametrize("consumer_client", CLIENTS)
@pytest.mark.parametrize("producer_client", CLIENTS)
def test_every_schema_round_trips_between_clients(
    config: Config, producer_client: str, consumer_client: str
) -> None:
    codec = Codec()
    topics = schema_topics(config)
    create_topic(config, topics["StreamResult"], 1)
    sent = [Record(topics[name], name, codec.encode(name, EXAMPLES[name])) for name in SCHEMA_NAMES]
    produce(producer_client, config, sent)

    received = read_all(consumer_client, config, sorted(set(topics.values())))

    assert sorted(r.key for r in received) == sorted(SCHEMA_NAMES)
    for record in received:
        assert record.topic == topics[record.key]
        assert codec.decode(record.value, expected=record.key) == EXAMPLES[record.key]


# -- transactions -------------------------------------------------------------------------------
def confluent_transactions(config: Config, topic: str, committed: list[Record],
                           aborted: list[Record]) -> None:
    producer = Producer(producer_config(
        config, **{"transactional.id": f"{config.topic_prefix}tx-confluent"}))
    producer.init_transactions(60)
    producer.begin_transaction()
    for r in committed:
        producer.produce(topic, r.value, r.key, partition=partition_for(r.key, 4))
    producer.commit_transaction(60)
    producer.begin_transaction()
    for r in aborted:
        producer.produce(topic, r.value, r.key, partition=partition_for(r.key, 4))
    assert producer.flush(60) == 0  # the aborted records reach the log, then the abort marker
    producer.abort_transaction(60)


async def aiokafka_transactions(config: Config, topic: str, committed: list[Record],
                                aborted: list[Record]) -> None:
    producer = AIOKafkaProducer(**aiokafka_kwargs(
        config, AIOKafkaProducer, transactional_id=f"{config.topic_prefix}tx-aiokafka"))
    await producer.start()  # init_transactions
    try:
        async with producer.transaction():
            for r in committed:
                await producer.send_and_wait(topic, r.value, key=r.key.encode())
        await producer.begin_transaction()
        for r in aborted:
            await producer.send_and_wait(topic, r.value, key=r.key.encode())
        await producer.abort_transaction()
    finally:
        await producer.stop()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("producer_client", CLIENTS)
def test_read_committed_sees_only_committed_transactions(
    config: Config, producer_client: str
) -> None:
    topic = config.topic("results")
    assert partitions_of(config, topic) == 4
    committed = [Record(topic, f"job-{i}", f"committed-{i}".encode()) for i in range(6)]
    aborted = [Record(topic, f"job-{i}", f"aborted-{i}".encode()) for i in range(6)]
    if producer_client == "confluent":
        confluent_transactions(config, topic, committed, aborted)
    else:
        asyncio.run(aiokafka_transactions(config, topic, committed, aborted))

    def values(records: list[Record]) -> list[bytes]:
        return sorted(r.value for r in records)

    for consumer_client in CLIENTS:
        seen = read_all(consumer_client, config, [topic], "read_committed")
        assert values(seen) == values(committed), consumer_client
        # the test can fail: the aborted records are in the log for whoever does not filter
        everything = read_all(consumer_client, config, [topic], "read_uncommitted")
        assert values(everything) == values(committed + aborted), consumer_client


# -- the partitioner ----------------------------------------------------------------------------
#: Job-id-like keys (the partitioning key of jobs, results and job events).
KEYS = [f"{day}-093000-{uuid.UUID(int=day * 7919).hex[:8]}" for day in range(20260101, 20260161)]


@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 7, 12, 64, 100])
def test_partition_for_matches_aiokafkas_default_partitioner(partitions: int) -> None:
    aiokafka_choice = DefaultPartitioner()
    every = list(range(partitions))
    for key in [*KEYS, "", "ключ", "日本語-キー", "x" * 1000]:
        assert partition_for(key, partitions) == aiokafka_choice(key.encode(), every, every), key


def java_produce(servers: str, topic: str, keys: list[str], value: str) -> None:
    """Keyed records through Kafka's own console producer (the Java client, default partitioner)."""
    lines = "".join(f"{key}\t{value}\n" for key in keys)
    proc = subprocess.run(
        [sys.executable, str(CLUSTER), "tool", "org.apache.kafka.tools.ConsoleProducer",
         "--bootstrap-server", servers, "--topic", topic,
         "--reader-property", "parse.key=true", "--reader-property", "key.separator=\t"],
        input=lines, capture_output=True, text=True, timeout=180, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.timeout(300)
def test_keyed_records_land_where_partition_for_says(config: Config) -> None:
    partitions = 7  # not a power of two, so a wrong modulo shows
    topic = config.topic("keyed")
    create_topic(config, topic, partitions)

    asyncio.run(aiokafka_produce(config, [Record(topic, k, b"aiokafka") for k in KEYS]))
    confluent_produce(config, [Record(topic, k, b"confluent") for k in KEYS])
    java_produce(config.bootstrap_servers, topic, KEYS, "java")

    landed = read_all("confluent", config, [topic])
    assert len(landed) == 3 * len(KEYS)
    assert len({r.partition for r in landed}) == partitions  # the keys spread: the check bites
    wrong = [(r.value.decode(), r.key, r.partition, partition_for(r.key, partitions))
             for r in landed if r.partition != partition_for(r.key, partitions)]
    assert not wrong, f"(client, key, landed, partition_for) {wrong[:10]}"
