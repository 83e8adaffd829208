"""Exactly-once commits of task results: one transactional producer per owned task partition.

aiokafka's `send_offsets_to_transaction` carries no consumer-group generation, so a zombie
worker cannot be fenced by generation (KIP-447). Instead each task partition has its own
transactional id, `<prefix><pool>.<topic>.<partition>`: the new owner's `init_transactions`
bumps the epoch, which aborts the old owner's open transaction and makes its next commit
fail with ProducerFenced (Kafka Streams' "EOS alpha" scheme).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaConnectionError,
    KafkaError,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)

from inferstream.config import Config
from inferstream.streams.batching import TaskRun
from inferstream.streams.kafka import aiokafka_kwargs

log = logging.getLogger(__name__)

#: Records to write in a commit: (topic, partition, key, value).
Outgoing = tuple[str, int, bytes, bytes]


@dataclass
class PendingTask:
    """A task record consumed from the partition, in offset order, with what it will write."""

    offset: int
    run: TaskRun | None  # None for a record that goes straight to the dead-letter topic
    outgoing: list[Outgoing]

    @property
    def ready(self) -> bool:
        return self.run is None or self.run.done


class PartitionLostError(Exception):
    """The partition's producer was fenced: another worker owns it now."""


class Owner(Protocol):
    """What a committer asks of the worker that owns it."""

    def owns(self, tp: TopicPartition) -> bool:
        """Whether the consumer group still assigns `tp` to this worker."""

    async def committed_offset(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of `tp` as the broker has it now."""

    async def commit_offset(self, tp: TopicPartition, offset: int) -> None:
        """Commit `offset` for `tp` outside any transaction (at-least-once mode)."""


#: A commit that takes longer than this has an unknown outcome (see `_commit`).
COMMIT_TIMEOUT_S = 30.0
_FENCED = (ProducerFenced, InvalidProducerEpoch, TransactionalIdAuthorizationFailed)


class PartitionCommitter:
    """Commits the finished tasks of one partition, in offset order, results with offsets."""

    def __init__(
        self,
        config: Config,
        tp: TopicPartition,
        group_id: str,
        render: Callable[[PendingTask], list[Outgoing]],
        owner: Owner,
        max_attempts: int = 8,
    ) -> None:
        self.tp = tp
        self.group_id = group_id
        self.render = render
        self.owner = owner
        self.max_attempts = max_attempts
        self.transactional_id = f"{config.topic_prefix}{config.pool}.{tp.topic}.{tp.partition}"
        self._config = config
        self._producer: AIOKafkaProducer | None = None
        self._pending: deque[PendingTask] = deque()
        self._lock = asyncio.Lock()
        self.lost = False

    def _new_producer(self) -> AIOKafkaProducer:
        return AIOKafkaProducer(**aiokafka_kwargs(
            self._config, AIOKafkaProducer,
            transactional_id=self.transactional_id,
            enable_idempotence=True,
            max_request_size=16 * 1024 * 1024,
        ))

    async def start(self) -> None:
        """Initialise transactions: fences the previous owner and aborts its open transaction.

        Completes or aborts whatever the previous holder of the transactional id left, so
        the committed offset read afterwards is final.
        """
        producer = self._new_producer()
        try:
            await producer.start()
        except BaseException:
            await _quietly_stop(producer)
            raise
        self._producer = producer

    def append(self, pending: PendingTask) -> None:
        self._pending.append(pending)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def busy(self) -> bool:
        """Tasks wait to be committed, or a commit is under way."""
        return not self.lost and (bool(self._pending) or self._lock.locked())

    async def commit_ready(self) -> list[PendingTask]:
        """Commit every finished task at the head of the queue in one transaction."""
        async with self._lock:
            ready: list[PendingTask] = []
            while self._pending and self._pending[0].ready and not self.lost:
                ready.append(self._pending.popleft())
            if ready:
                await self._commit(ready)
            return ready

    async def _commit(self, tasks: list[PendingTask]) -> None:
        """Commit, or find out that the commit happened; never commit the same tasks twice.

        Fenced: another worker owns the partition. Anything else (a timeout, a broker gone,
        an abortable error) leaves the outcome unknown, so the producer is re-initialised,
        which aborts our transaction if it is still open and waits for it if it was
        committing, and the committed offset then says whether the tasks are in.
        """
        records = [record for task in tasks for record in self.render(task)]
        target = tasks[-1].offset + 1
        for attempt in range(1, self.max_attempts + 1):
            if self.lost:
                raise PartitionLostError(f"{self.tp}: closed")
            try:
                await asyncio.wait_for(self._transaction(records, {self.tp: target}),
                                       COMMIT_TIMEOUT_S)
                return
            except _FENCED as exc:
                self._mark_lost()
                raise PartitionLostError(f"{self.tp}: fenced by a new owner") from exc
            except Exception as exc:  # any other failure leaves the outcome unknown
                log.warning("commit outcome unknown tp=%s attempt=%d error=%r",
                            self.tp, attempt, exc)
            if await self._committed_after_restart(target):
                return
            await asyncio.sleep(min(0.2 * 2**attempt, 5))
        self._mark_lost()
        raise PartitionLostError(f"{self.tp}: commit failed {self.max_attempts} times")

    async def _committed_after_restart(self, target: int) -> bool:
        """Re-initialise the producer (only while we own the partition), then ask whether
        the committed offset already covers `target`."""
        if not self.owner.owns(self.tp):
            self._mark_lost()
            raise PartitionLostError(f"{self.tp}: no longer assigned")
        await self._stop_producer()
        try:
            await asyncio.wait_for(self.start(), COMMIT_TIMEOUT_S)
            committed = await asyncio.wait_for(self.owner.committed_offset(self.tp),
                                               COMMIT_TIMEOUT_S)
        except (KafkaError, TimeoutError) as exc:
            log.warning("cannot re-initialise producer tp=%s error=%r", self.tp, exc)
            return False
        return committed is not None and committed >= target

    async def _transaction(self, records: list[Outgoing], offsets: dict[Any, int]) -> None:
        producer = self._producer
        if producer is None:
            raise KafkaConnectionError(f"no producer for {self.tp}")
        async with producer.transaction():
            sends = [
                await producer.send(topic, value, key=key, partition=partition)
                for topic, partition, key, value in records
            ]
            await asyncio.gather(*sends)
            await producer.send_offsets_to_transaction(offsets, self.group_id)

    def _mark_lost(self) -> None:
        self.lost = True
        for task in self._pending:
            if task.run is not None:
                task.run.cancelled = True
        self._pending.clear()

    async def _stop_producer(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await _quietly_stop(producer)

    async def close(self, wait_s: float = 10.0) -> None:
        """Drop what is not committed (the next owner redoes it) and stop the producer,
        after the commit under way, if any, ends (up to `wait_s`)."""
        self._mark_lost()
        try:
            await asyncio.wait_for(self._lock.acquire(), wait_s)
        except TimeoutError:
            log.warning("closing tp=%s while a commit is still under way", self.tp)
            await self._stop_producer()
            return
        try:
            await self._stop_producer()
        finally:
            self._lock.release()


async def _quietly_stop(producer: AIOKafkaProducer) -> None:
    try:
        await asyncio.wait_for(producer.stop(), 10)
    except (KafkaError, TimeoutError) as exc:
        log.debug("producer stop failed error=%r", exc)
