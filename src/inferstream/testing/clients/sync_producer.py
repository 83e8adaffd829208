"""`MemoryProducer`: the confluent-kafka `Producer` calls inferstream makes, in memory.

Records are in the log once `produce` returns (transactional ones invisible to
read_committed readers until the commit); delivery callbacks run in `poll` and `flush`.
A fenced producer learns it at its next call to the transaction coordinator
(`send_offsets_to_transaction`, `commit_transaction`, `abort_transaction`), with a fatal
`_FENCED` error that every later transactional call repeats, as librdkafka does.

A record larger than the producer's `message.max.bytes` (where set) is refused by `produce`
itself, and one larger than its topic's `max.message.bytes` (where the topic sets one) by the
broker: its delivery fails with MSG_SIZE_TOO_LARGE, and so does the transaction that holds
it (an abortable error, until `abort_transaction`), as with librdkafka and Kafka.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, TypeVar

from aiokafka.partitioner import murmur2
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from inferstream.testing.broker import MemoryBroker
from inferstream.testing.clients.metadata import (
    NOT_CONFIGURED,
    STATE,
    TIMED_OUT,
    ClusterMetadata,
    GroupMetadata,
    MemoryMessage,
    cluster_metadata,
    kafka_error,
    kafka_errors,
)
from inferstream.testing.errors import Fault, FencedError

T = TypeVar("T")
DeliveryCallback = Callable[[Any, Any], None]


def _state_error(reason: str) -> KafkaException:
    return KafkaException(KafkaError(STATE, reason))


class MemoryProducer:
    """A confluent-kafka-shaped producer of a MemoryBroker, transactional with
    `transactional.id`."""

    def __init__(self, broker: MemoryBroker, settings: dict[str, Any]) -> None:
        self._broker = broker
        self.settings = dict(settings)
        self.transactional_id: str | None = settings.get("transactional.id")
        self.transaction_timeout_s = float(settings.get("transaction.timeout.ms", 60_000)) / 1000
        self.epoch: int | None = None
        self.in_transaction = False
        self._fatal: KafkaError | None = None
        #: what failed the open transaction, which must be aborted (a record refused)
        self._abortable: KafkaError | None = None
        self._deliveries: list[tuple[DeliveryCallback, KafkaError | None, MemoryMessage]] = []
        self._spread = itertools.count()

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1, on_delivery: DeliveryCallback | None = None,
                **kwargs: Any) -> None:
        callback = on_delivery or kwargs.get("callback")
        if self.transactional_id is not None and not self.in_transaction:
            raise _state_error("produce outside a transaction")
        size = len(key or b"") + len(value or b"")
        if size > int(self.settings.get("message.max.bytes", size)):
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE,
                                            "Broker: Message size too large"))
        with kafka_errors():
            if partition < 0:
                partition = self._partition(topic, key)
            self._broker.partition_count(topic)
        message = MemoryMessage(topic, partition, -1, key, value)
        error = self._refused(topic, size)
        try:
            if error is None:
                offset = self._append(topic, partition, key, value)
                message = MemoryMessage(topic, partition, offset, key, value)
        except FencedError as exc:  # the produce request fails; the next call raises it
            error = self._fatal = kafka_error(exc)
        if callback is not None:
            self._deliveries.append((callback, error, message))

    def _refused(self, topic: str, size: int) -> KafkaError | None:
        """The broker's refusal of a record of `size` bytes over its topic's limit; one in a
        transaction fails the transaction too."""
        limit = self._broker.topic_configs(topic).get("max.message.bytes")
        if limit is None or size <= int(limit):
            return None
        error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, f"ProduceRequest for {topic} failed: "
                           "Broker: Message size too large", txn_requires_abort=True)
        if self.transactional_id is not None:
            self._abortable = self._abortable or error
        return error

    def _partition(self, topic: str, key: bytes | None) -> int:
        """librdkafka's murmur2_random: murmur2 of the key, spread when there is none."""
        count = self._broker.partition_count(topic)
        if key is None:
            return next(self._spread) % count
        return int(murmur2(key) & 0x7FFFFFFF) % count

    def _append(self, topic: str, partition: int, key: bytes | None, value: bytes | None
                ) -> int:
        if self.transactional_id is None or self.epoch is None:
            return self._broker.produce(topic, partition, key, value).offset
        return self._broker.produce_transactional(self.transactional_id, self.epoch, topic,
                                                  partition, key, value)

    def poll(self, timeout: float = -1) -> int:
        deliveries, self._deliveries = self._deliveries, []
        for callback, error, message in deliveries:
            callback(error, message)
        return len(deliveries)

    def flush(self, timeout: float = -1) -> int:
        self.poll(0)
        return 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return cluster_metadata(self._broker, topic)

    # -- transactions ------------------------------------------------------------------------
    def init_transactions(self, timeout: float = -1) -> None:
        tid = self._require_transactional()
        self._raise_fatal()
        self.epoch = self._coordinated("init", lambda: self._broker.init_transactions(tid))
        self.in_transaction = False

    def begin_transaction(self) -> None:
        tid = self._require_transactional()
        if self.epoch is None:
            raise _state_error("init_transactions first")
        if self.in_transaction:
            raise _state_error("a transaction is already open")
        self._raise_fatal()
        epoch = self.epoch
        self._guarded(lambda: self._broker.begin(tid, epoch, self.transaction_timeout_s))
        self.in_transaction = True
        self._abortable = None

    def send_offsets_to_transaction(self, positions: list[TopicPartition],
                                    group_metadata: GroupMetadata, timeout: float = -1) -> None:
        tid, epoch = self._open_transaction()
        if self._abortable is not None:  # librdkafka's words for a transaction failed before
            raise _state_error("Failed to commit offsets to transaction: Erroneous state")
        offsets = {(tp.topic, tp.partition): tp.offset for tp in positions if tp.offset >= 0}
        # like the broker: metadata of a consumer outside any group is not checked
        member = ((group_metadata.member_id, group_metadata.generation)
                  if group_metadata.member_id or group_metadata.generation >= 0 else None)
        self._coordinated("send_offsets", lambda: self._broker.send_offsets(
            tid, epoch, group_metadata.group_id, offsets, member))

    def commit_transaction(self, timeout: float = -1) -> None:
        tid, epoch = self._open_transaction()
        self.flush()
        if self._abortable is not None:
            raise KafkaException(self._abortable)
        self._coordinated("commit", lambda: self._end(tid, epoch, commit=True))

    def abort_transaction(self, timeout: float = -1) -> None:
        tid, epoch = self._open_transaction()
        self._deliveries.clear()
        self._coordinated("abort", lambda: self._end(tid, epoch, commit=False))
        self._abortable = None

    def _end(self, tid: str, epoch: int, commit: bool) -> None:
        self._broker.end_transaction(tid, epoch, commit)
        self.in_transaction = False

    # -- internals ---------------------------------------------------------------------------
    def _require_transactional(self) -> str:
        if self.transactional_id is None:
            raise KafkaException(KafkaError(NOT_CONFIGURED,
                                            "transactional.id is not set"))
        return self.transactional_id

    def _open_transaction(self) -> tuple[str, int]:
        tid = self._require_transactional()
        self._raise_fatal()
        if not self.in_transaction or self.epoch is None:
            raise _state_error("no transaction is open")
        return tid, self.epoch

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            raise KafkaException(self._fatal)

    def _guarded(self, call: Callable[[], T]) -> T:
        """`call()`, a refusal raised as KafkaException; a fatal one sticks."""
        try:
            with kafka_errors():
                return call()
        except KafkaException as exc:
            if exc.args[0].fatal():
                self._fatal = exc.args[0]
            raise

    def _coordinated(self, name: str, call: Callable[[], T]) -> T:
        """A call to the transaction coordinator, with the fault injected into it, if any."""
        fault = self._broker.take_fault(self.transactional_id, name)
        if fault is not None and fault.stall is not None:
            fault.stall.wait()
        if fault is not None and fault.fail == "before":
            raise _fault_error(fault, name)
        result = self._guarded(call)
        if fault is not None and fault.fail == "after":
            raise _fault_error(fault, name)
        return result


def _fault_error(fault: Fault, name: str) -> BaseException:
    if fault.error is not None:
        return fault.error
    return KafkaException(KafkaError(TIMED_OUT, f"injected: {name} timed out",
                                     retriable=True))
