"""The worker's queue: items in flight, owned task partitions and their consumer lag, and
the `queue` collector that reports it.

Lag is the log end the consumer last saw (its last stable offset: the worker reads
committed) minus the group's committed offset, summed over the owned partitions. Committed
offsets come from the worker's own commits (`after_commit`); a partition it has not yet
committed is asked of the coordinator once, so a sample costs no round trip.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from inferstream.kafka.clients import AsyncConsumer
from inferstream.schemas.records import QueueFields
from inferstream.serving.collectors.base import QueueState, SampleContext
from inferstream.serving.hooks import WorkerHooks

log = logging.getLogger(__name__)

#: Longest wait for the coordinator's committed offset of a newly owned partition.
COMMITTED_TIMEOUT_S = 1.0


class QueueProbe(WorkerHooks):
    """Keeps the committed offset of each owned task partition; `state` reads the queue."""

    def __init__(self) -> None:
        self._committed: dict[int, int] = {}

    def after_commit(self, partition: int, offset: int, seconds: float) -> None:
        self._committed[partition] = max(offset, self._committed.get(partition, 0))

    async def state(self, consumer: AsyncConsumer | None, items_in_flight: int) -> QueueState:
        """The queue now; lag is None while any owned partition's ends are unknown."""
        if consumer is None:
            return QueueState(items_in_flight)
        owned = sorted(consumer.assignment())
        for gone in set(self._committed) - {tp.partition for tp in owned}:
            del self._committed[gone]  # moved away: its next owner commits it now
        lag: int | None = 0
        for tp in owned:
            end = _end(consumer, tp)
            committed = await self._committed_offset(consumer, tp)
            if end is None or committed is None or lag is None:
                lag = None
                continue
            lag += max(0, end - committed)
        return QueueState(items_in_flight, tuple(tp.partition for tp in owned), lag)

    async def _committed_offset(self, consumer: AsyncConsumer, tp: TopicPartition
                                ) -> int | None:
        partition = tp.partition
        if partition not in self._committed:
            try:
                offset = await asyncio.wait_for(consumer.committed(tp), COMMITTED_TIMEOUT_S)
            except (KafkaError, TimeoutError) as exc:
                log.debug("no committed offset for %s yet: %r", tp, exc)
                return None
            # Never committed: the group starts from the log's beginning.
            self._committed.setdefault(partition, offset or 0)
        return self._committed[partition]


def _end(consumer: AsyncConsumer, tp: TopicPartition) -> int | None:
    try:
        end = consumer.last_stable_offset(tp)
    except (AssertionError, KafkaError):  # revoked since `assignment()` (aiokafka asserts)
        return None
    return end if end is not None and end >= 0 else None


class QueueCollector:
    """`queue_depth` (items in flight), `assigned_partitions` and `consumer_lag`."""

    name = "queue"

    def collect(self, context: SampleContext) -> QueueFields:
        queue = context.queue
        return QueueFields(queue_depth=queue.items_in_flight,
                           assigned_partitions=list(queue.partitions),
                           consumer_lag=queue.consumer_lag)
