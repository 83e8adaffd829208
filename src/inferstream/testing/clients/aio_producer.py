"""`MemoryAIOProducer`: the aiokafka `AIOKafkaProducer` calls the worker makes, in memory.

With `transactional_id`, `start()` initialises transactions: the id's epoch goes up, the
previous holder's open transaction is aborted and that holder fenced (its next call raises
ProducerFenced, and so does every call after it, as aiokafka's fatal state does).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

from aiokafka import TopicPartition
from aiokafka.errors import (
    IllegalOperation,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    ProducerFenced,
)
from aiokafka.partitioner import murmur2
from aiokafka.structs import RecordMetadata

from inferstream.testing.broker import MemoryBroker
from inferstream.testing.errors import (
    BrokerError,
    Fault,
    FencedError,
    TransactionStateError,
    UnknownTopicError,
)

T = TypeVar("T")


@contextmanager
def aiokafka_errors() -> Iterator[None]:
    """Broker refusals raised as the aiokafka errors a real producer raises."""
    try:
        yield
    except FencedError as exc:
        raise ProducerFenced() from exc
    except TransactionStateError as exc:
        raise IllegalStateError(str(exc)) from exc
    except UnknownTopicError as exc:
        raise KafkaTimeoutError(f"Failed to update metadata of {exc}") from exc
    except BrokerError as exc:
        raise KafkaError(str(exc)) from exc


class MemoryAIOProducer:
    """An aiokafka-shaped producer of a MemoryBroker, transactional with `transactional_id`."""

    def __init__(self, broker: MemoryBroker, kwargs: dict[str, Any]) -> None:
        self._broker = broker
        self.transactional_id: str | None = kwargs.get("transactional_id")
        self.transaction_timeout_s = float(kwargs.get("transaction_timeout_ms", 60_000)) / 1000
        #: aiokafka's default; a larger record fails `send` as aiokafka's does
        self.max_request_size = int(kwargs.get("max_request_size", 1048576))
        self.epoch: int | None = None
        self.in_transaction = False
        self.fenced = False
        self.stopped = False
        self._spread = itertools.count()

    async def start(self) -> None:
        tid = self.transactional_id
        if tid is not None:
            self.epoch = await self._coordinated(
                "init", lambda: self._broker.init_transactions(tid))

    async def stop(self) -> None:
        """Stop; an open transaction stays open until a successor's init or its timeout."""
        self.stopped = True

    async def partitions_for(self, topic: str) -> set[int]:
        with aiokafka_errors():
            return set(range(self._broker.partition_count(topic)))

    async def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Any = None) -> asyncio.Future[RecordMetadata]:
        """Append the record; returns a future already resolved with its metadata."""
        if value is None and key is None:
            raise ValueError("Need at least one: key or value")
        if self.transactional_id is not None and not self.in_transaction:
            raise IllegalOperation("Can't send messages while not in transaction")
        self._raise_fenced()
        size = len(key or b"") + len(value or b"") + sum(len(k) + len(v) for k, v in headers or ())
        if size > self.max_request_size:
            raise MessageSizeTooLargeError(f"The message is {size} bytes when serialized ...")
        with aiokafka_errors():
            if partition is None:
                partition = self._partition(topic, key)
            stored = tuple(headers or ())
            offset = self._guarded(lambda: self._append(topic, partition, key, value, stored))
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        future.set_result(RecordMetadata(topic, partition, TopicPartition(topic, partition),
                                         offset, timestamp_ms or -1, 0, 0))
        return future

    async def send_and_wait(self, topic: str, value: bytes | None = None,
                            key: bytes | None = None, partition: int | None = None
                            ) -> RecordMetadata:
        return await (await self.send(topic, value, key=key, partition=partition))

    def _partition(self, topic: str, key: bytes | None) -> int:
        count = self._broker.partition_count(topic)
        if key is None:
            return next(self._spread) % count
        return int(murmur2(key) & 0x7FFFFFFF) % count

    def _append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                headers: tuple[tuple[str, bytes], ...] = ()) -> int:
        if self.transactional_id is None or self.epoch is None:
            return self._broker.produce(topic, partition, key, value, headers=headers).offset
        return self._broker.produce_transactional(self.transactional_id, self.epoch, topic,
                                                  partition, key, value, headers)

    # -- transactions ------------------------------------------------------------------------
    def transaction(self) -> _TransactionContext:
        return _TransactionContext(self)

    async def begin_transaction(self) -> None:
        tid, epoch = self._transactional()
        if self.in_transaction:
            raise IllegalStateError("a transaction is already open")
        self._guarded(lambda: self._broker.begin(tid, epoch, self.transaction_timeout_s))
        self.in_transaction = True

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, Any],
                                          group_id: str) -> None:
        tid, epoch = self._transactional()
        if not self.in_transaction:
            raise IllegalOperation("Not in the middle of a transaction")
        plain = {(tp.topic, tp.partition): v[0] if isinstance(v, tuple) else v
                 for tp, v in offsets.items()}
        await self._coordinated("send_offsets", lambda: self._broker.send_offsets(
            tid, epoch, group_id, plain))

    async def commit_transaction(self) -> None:
        tid, epoch = self._transactional()
        await self._coordinated("commit", lambda: self._end(tid, epoch, commit=True))

    async def abort_transaction(self) -> None:
        tid, epoch = self._transactional()
        await self._coordinated("abort", lambda: self._end(tid, epoch, commit=False))

    def _end(self, tid: str, epoch: int, commit: bool) -> None:
        self._broker.end_transaction(tid, epoch, commit)
        self.in_transaction = False

    def _transactional(self) -> tuple[str, int]:
        if self.transactional_id is None:
            raise IllegalOperation("You need to configure transaction_id to use transactions")
        if self.epoch is None:
            raise IllegalStateError("start() the producer first")
        self._raise_fenced()
        return self.transactional_id, self.epoch

    def _raise_fenced(self) -> None:
        if self.fenced:
            raise ProducerFenced()

    def _guarded(self, call: Callable[[], T]) -> T:
        try:
            with aiokafka_errors():
                return call()
        except ProducerFenced:
            self.fenced = True
            raise

    async def _coordinated(self, name: str, call: Callable[[], T]) -> T:
        """A call to the transaction coordinator, with the fault injected into it, if any."""
        fault = self._broker.take_fault(self.transactional_id, name)
        return await faulted(fault, lambda: self._guarded(call), name)


class _TransactionContext:
    """`async with producer.transaction()`: commit on success, abort on an error, except
    when the producer is fenced (aiokafka leaves a fatal transaction alone)."""

    def __init__(self, producer: MemoryAIOProducer) -> None:
        self._producer = producer

    async def __aenter__(self) -> _TransactionContext:
        await self._producer.begin_transaction()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            await self._producer.commit_transaction()
        elif not self._producer.fenced:
            await self._producer.abort_transaction()


async def faulted(fault: Fault | None, call: Callable[[], T], name: str) -> T:
    """`call()` with `fault` applied: stalled (the event loop runs on), failed before or
    after it, with the fault's error or aiokafka's KafkaTimeoutError."""
    if fault is not None and fault.stall is not None:
        while not fault.stall.is_set():
            await asyncio.sleep(0.005)
    error = fault.error if fault is not None and fault.error is not None else (
        KafkaTimeoutError(f"injected: {name} timed out"))
    if fault is not None and fault.fail == "before":
        raise error
    result = call()
    if fault is not None and fault.fail == "after":
        raise error
    return result
