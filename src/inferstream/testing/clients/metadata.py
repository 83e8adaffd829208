"""confluent-kafka-shaped values of the in-memory transport: messages, metadata, errors, admin."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, KafkaException, TopicPartition

from inferstream.testing.broker import MemoryBroker
from inferstream.testing.errors import (
    BrokerError,
    FencedError,
    NotMemberError,
    StaleGenerationError,
    TransactionStateError,
    UnknownPartitionError,
    UnknownTopicError,
)

# librdkafka's local error codes are the underscore names of KafkaError
FENCED: int = KafkaError._FENCED  # noqa: SLF001
UNKNOWN_TOPIC: int = KafkaError._UNKNOWN_TOPIC  # noqa: SLF001
UNKNOWN_PARTITION: int = KafkaError._UNKNOWN_PARTITION  # noqa: SLF001
STATE: int = KafkaError._STATE  # noqa: SLF001
FAIL: int = KafkaError._FAIL  # noqa: SLF001
INVALID_ARG: int = KafkaError._INVALID_ARG  # noqa: SLF001
NOT_CONFIGURED: int = KafkaError._NOT_CONFIGURED  # noqa: SLF001
TIMED_OUT: int = KafkaError._TIMED_OUT  # noqa: SLF001


class MemoryMessage:
    """A record, or an error or end-of-partition event, as a confluent-kafka consumer gets it."""

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None = None,
                 value: bytes | None = None, timestamp_ms: int = 0,
                 error: KafkaError | None = None,
                 headers: tuple[tuple[str, bytes], ...] = ()) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._timestamp_ms = key, value, timestamp_ms
        self._error = error
        self._headers = headers

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int | None:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, self._timestamp_ms

    def headers(self) -> list[tuple[str, bytes]] | None:
        """As confluent-kafka: None for a record without headers."""
        return list(self._headers) or None

    def __len__(self) -> int:
        return len(self._value or b"")


@dataclass
class PartitionMetadata:
    id: int
    leader: int = 1
    replicas: list[int] = field(default_factory=lambda: [1])
    isrs: list[int] = field(default_factory=lambda: [1])
    error: KafkaError | None = None


@dataclass
class TopicMetadata:
    topic: str
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)
    error: KafkaError | None = None


@dataclass
class ClusterMetadata:
    topics: dict[str, TopicMetadata]
    cluster_id: str = "memory"
    controller_id: int = 1
    brokers: dict[int, Any] = field(default_factory=dict)


def cluster_metadata(broker: MemoryBroker, topic: str | None = None) -> ClusterMetadata:
    """What `list_topics(topic)` answers; an unknown named topic comes with an error."""
    counts = broker.topics()
    names = [topic] if topic is not None else sorted(counts)
    topics = {}
    for name in names:
        if name in counts:
            parts = {p: PartitionMetadata(p) for p in range(counts[name])}
            topics[name] = TopicMetadata(name, parts)
        else:
            topics[name] = TopicMetadata(name, error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    return ClusterMetadata(topics)


@dataclass(frozen=True)
class GroupMetadata:
    """What `consumer_group_metadata()` returns: the producer sends it with the offsets."""

    group_id: str
    member_id: str
    generation: int


def kafka_error(exc: BrokerError) -> KafkaError:
    """The KafkaError librdkafka reports for what the broker refused."""
    if isinstance(exc, FencedError):
        return KafkaError(FENCED, str(exc), fatal=True)
    if isinstance(exc, NotMemberError | StaleGenerationError):
        code = (KafkaError.UNKNOWN_MEMBER_ID if isinstance(exc, NotMemberError)
                else KafkaError.ILLEGAL_GENERATION)
        return KafkaError(code, str(exc), txn_requires_abort=True)
    codes = {UnknownTopicError: UNKNOWN_TOPIC,
             UnknownPartitionError: UNKNOWN_PARTITION,
             TransactionStateError: STATE}
    return KafkaError(codes.get(type(exc), FAIL), str(exc))


@contextmanager
def kafka_errors() -> Iterator[None]:
    """Broker refusals raised as confluent-kafka's KafkaException."""
    try:
        yield
    except BrokerError as exc:
        raise KafkaException(kafka_error(exc)) from exc


class MemoryAdmin:
    """The AdminClient calls topic management makes: list, create, describe configs."""

    def __init__(self, broker: MemoryBroker, settings: dict[str, Any]) -> None:
        self._broker = broker
        self.settings = settings

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return cluster_metadata(self._broker, topic)

    def create_topics(self, new_topics: list[Any], **_: Any) -> dict[str, Future[None]]:
        """NewTopic-shaped objects (`topic`, `num_partitions`, `config`) to futures."""
        futures: dict[str, Future[None]] = {}
        for new in new_topics:
            future: Future[None] = Future()
            if new.topic in self._broker.topics():
                future.set_exception(KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS)))
            else:
                self._broker.create_topic(new.topic, new.num_partitions, dict(new.config or {}))
                future.set_result(None)
            futures[new.topic] = future
        return futures

    def describe_configs(self, resources: list[Any], **_: Any) -> dict[Any, Future[Any]]:
        """ConfigResource-shaped objects (`name`) to futures of {key: entry with `.value`}: a
        topic's own settings over Kafka's defaults of those asked here."""
        described: dict[Any, Future[Any]] = {}
        for resource in resources:
            future: Future[Any] = Future()
            configs = {"cleanup.policy": "delete", "max.message.bytes": "1048588",  # Kafka's
                       "segment.ms": "604800000", **self._broker.topic_configs(resource.name)}
            future.set_result({k: ConfigValue(k, v) for k, v in configs.items()})
            described[resource] = future
        return described


    def incremental_alter_configs(self, resources: list[Any], **_: Any
                                  ) -> dict[Any, Future[None]]:
        """ConfigResource-shaped objects (`name`, `incremental_configs` of entries with
        `name` and `value`: SET only) to futures; `refuse_alter` makes them fail as an ACL
        would."""
        altered: dict[Any, Future[None]] = {}
        for resource in resources:
            future: Future[None] = Future()
            if self.settings.get("refuse_alter"):
                future.set_exception(KafkaException(KafkaError(
                    KafkaError.TOPIC_AUTHORIZATION_FAILED)))
            else:
                broker = self._broker
                with broker._lock:  # noqa: SLF001 - the broker's topic settings, as Kafka's
                    broker._configs.setdefault(resource.name, {}).update(  # noqa: SLF001
                        {entry.name: entry.value for entry in resource.incremental_configs})
                future.set_result(None)
            altered[resource] = future
        return altered

    def describe_consumer_groups(self, group_ids: list[str], **_: Any
                                 ) -> dict[str, Future[Any]]:
        """Group ids to futures of a ConsumerGroupDescription-shaped object: `.members`,
        each with `member_id`, `client_id` and `assignment.topic_partitions`."""
        described: dict[str, Future[Any]] = {}
        for group_id in group_ids:
            members = [GroupMember(member_id, client_id, MemberAssignment(
                [TopicPartition(topic, partition) for topic, partition in assigned]))
                for member_id, client_id, assigned in self._broker.describe_group(group_id)]
            future: Future[Any] = Future()
            future.set_result(GroupDescription(group_id, members))
            described[group_id] = future
        return described


@dataclass(frozen=True)
class MemberAssignment:
    topic_partitions: list[TopicPartition]


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    assignment: MemberAssignment


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    members: list[GroupMember]


@dataclass(frozen=True)
class ConfigValue:
    name: str
    value: str
