"""`--guarantee at-least-once`: results first, then the offset; no transactions.

Cheaper than the transactional path (no transaction markers, one shared idempotent producer),
and it never loses an item: a task's offset is committed only after its result is
acknowledged. What it gives up: a worker that dies, or is paused past its session timeout,
between the two steps leaves a result whose task the next owner runs again, so the results
topic can hold the same (job, task, attempt) twice. The controller's ledger still counts
each task once, so job outputs stay exact; raw `results` readers see the duplicates.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.errors import CommitFailedError, KafkaError

from inferstream.kafka.clients import AsyncProducer, Outgoing
from inferstream.kafka.errors import PartitionLostError
from inferstream.serving.committers.base import (
    COMMIT_TIMEOUT_S,
    NO_WINDOW,
    CommitWindow,
    Owner,
    PartitionCommitter,
    retry_delay_s,
)

log = logging.getLogger(__name__)


class AtLeastOnceCommitter(PartitionCommitter):
    """Sends results through a shared producer, then commits the consumer offset."""

    def __init__(self, tp: Any, group_id: str, owner: Owner, producer: AsyncProducer,
                 window: CommitWindow = NO_WINDOW) -> None:
        super().__init__(tp, group_id, owner, window=window)
        self._shared = producer

    async def start(self) -> None:
        """Nothing to fence: the shared producer is started by the worker."""

    async def _commit(self, records: list[Outgoing], offset: int) -> None:
        for attempt in range(1, self.max_attempts + 1):
            try:
                await asyncio.wait_for(self._send(records), COMMIT_TIMEOUT_S)
                await asyncio.wait_for(self.owner.commit_offset(self.tp, offset),
                                       COMMIT_TIMEOUT_S)
                return
            except CommitFailedError as exc:  # the group moved the partition: redone there
                self._mark_lost()
                raise PartitionLostError(f"{self.tp}: {exc}") from exc
            except (KafkaError, TimeoutError) as exc:
                log.warning("at-least-once commit failed tp=%s attempt=%d error=%r",
                            self.tp, attempt, exc)
                if not self.owner.owns(self.tp):
                    self._mark_lost()
                    raise PartitionLostError(f"{self.tp}: no longer assigned") from exc
                await asyncio.sleep(retry_delay_s(attempt))
        self._mark_lost()
        raise PartitionLostError(f"{self.tp}: commit failed {self.max_attempts} times")

    async def _send(self, records: list[Outgoing]) -> None:
        """`records` sent, those marked `first` acknowledged before the others go: with no
        transaction, a TaskResult sent beside a piece it names that failed would be a result
        the readers never make whole."""
        for batch in ([r for r in records if r.first], [r for r in records if not r.first]):
            sends = [await self._shared.send(r.topic, r.value, key=r.key,
                                             partition=r.partition,
                                             headers=list(r.headers) or None)
                     for r in batch]
            await asyncio.gather(*sends)

    async def _stop_producer(self) -> None:
        """The shared producer outlives partitions; the worker stops it."""
