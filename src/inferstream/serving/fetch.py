"""How a worker reads its partitions: a fair share of each owned one per fetch, and about
once a second a report of its load (the items in flight and each partition's lag)."""

from __future__ import annotations

import time
from typing import Any

from aiokafka import TopicPartition

from inferstream.kafka.clients import AsyncConsumer
from inferstream.kafka.settings import poll_timeout_s
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.ownership import Ownership
from inferstream.serving.served import ServedModels

#: Seconds between two reports of the in-flight items and the consumer lag.
LOAD_INTERVAL_S = 1.0


class Fetcher:
    """Fetches records from the partitions `ownership` holds; reports load to `hooks`."""

    def __init__(self, ownership: Ownership, served: ServedModels, hooks: WorkerHooks) -> None:
        self.consumer: AsyncConsumer = ownership.consumer
        self.ownership = ownership
        self.served = served
        self.hooks = hooks
        self._load_at = 0.0

    async def fetch(self, room: int, idle_exit_s: float | None
                    ) -> dict[TopicPartition, list[Any]]:
        """Up to about `room / 8` records, taken evenly from every owned partition; waits
        for one as long as bounded mode (`idle_exit_s`) allows.

        aiokafka hands out buffered records one partition at a time, so a single `getmany`
        would run one partition's whole backlog before the next (a partition that just moved
        here would wait behind it); asking each partition in turn keeps them interleaved.
        """
        if time.monotonic() - self._load_at >= LOAD_INTERVAL_S:
            self._load_at = time.monotonic()
            self.report_load()
        owned = sorted(self.consumer.assignment())
        share = max(1, room // (8 * max(1, len(owned))))
        batches: dict[TopicPartition, list[Any]] = {}
        for tp in owned:
            got = await self.consumer.getmany(tp, timeout_ms=0, max_records=share)
            batches.update(got)
        if batches:
            return batches
        got_any: dict[TopicPartition, list[Any]] = await self.consumer.getmany(
            timeout_ms=int(poll_timeout_s(idle_exit_s) * 1000), max_records=share)
        return got_any

    def report_load(self) -> None:
        """The items in flight, and the consumer lag of each owned partition: its last
        stable offset (the end a read_committed consumer sees) after its committed one, as
        kafka-consumer-groups counts it: the commit marker of the controller's last
        transaction lies past the last task, so an idle partition it wrote to shows 1
        (aiokafka's position does not move past a marker either)."""
        lags = {}
        for tp in self.consumer.assignment():
            offset = self.ownership.offsets.get(tp)
            stable = self.consumer.last_stable_offset(tp)
            if offset is not None and stable is not None:
                lags[tp.partition] = max(0, stable - offset)
        self.hooks.on_load(self.served.items_in_flight, lags)
