"""A worker's part in its pool's scheduling: the policy table it follows, the assignor its
consumer uses, and the watch that lets the leader rebalance when the policy moves and that
hands the worker the batch size its pool's strategy recommends for it (`on_batch_size`).

Settings: `worker.assignor` (`policy` or `roundrobin`), `worker.rebalance_threshold`,
`worker.min_rebalance_interval_s`, `worker.policy_max_age_s`. The worker owns the
lifecycle: `start()` before its consumer is built, `watch(consumer)` once it is, `stop()`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from inferstream.config import Config
from inferstream.kafka.clients import KafkaClients
from inferstream.policy.assignor import PolicyAssignor
from inferstream.policy.rejoin import request_rejoin
from inferstream.policy.table import PolicyTable
from inferstream.policy.trigger import RebalanceTrigger
from inferstream.schemas import Codec
from inferstream.schemas.records import Calibration

log = logging.getLogger(__name__)

#: Seconds between two checks of the policy by the watch.
CHECK_INTERVAL_S = 1.0


class PoolMembership:
    """The policy side of one worker's group membership (nothing with `roundrobin`)."""

    def __init__(self, config: Config, worker_id: str, clients: KafkaClients, codec: Codec,
                 models: Callable[[], Sequence[str]],
                 calibration: Callable[[], Calibration | None],
                 on_batch_size: Callable[[str, int | None], None] = lambda model, size: None,
                 ) -> None:
        options = config.worker
        self.enabled = options.assignor == "policy"
        self.worker_id = worker_id
        self.on_batch_size = on_batch_size
        #: the (model, batch size) last handed to `on_batch_size`
        self.batch_size: tuple[str, int | None] | None = None
        self.table = PolicyTable(config, clients, codec, max_age_s=options.policy_max_age_s)
        self.assignor = PolicyAssignor(config.pool, worker_id, self.table, models,
                                       lambda: _items_per_s(calibration()))
        self.trigger = RebalanceTrigger(options.rebalance_threshold,
                                        options.min_rebalance_interval_s)
        self.rejoins = 0
        self._watch: asyncio.Task[None] | None = None

    def strategies(self) -> tuple[Any, ...]:
        """The consumer's `partition_assignment_strategy`: exactly one assignor.

        Never more than one: aiokafka 0.14 sends one JoinGroup per configured assignor
        (the request is built inside its loop over the assignors, aio-libs/aiokafka#1168),
        each with different protocol metadata, so every join looks like a metadata change
        to the broker and starts another rebalance; two such members could rebalance each
        other for minutes. The price: every worker of a pool uses the same `--assignor`
        (a member with another one is refused by the broker, see `worker.worker`).
        """
        if not self.enabled:
            return (RoundRobinPartitionAssignor,)
        return (self.assignor,)

    def start(self) -> None:
        if self.enabled:
            self.table.start()

    def watch(self, consumer: Any) -> None:
        if self.enabled:
            self._watch = asyncio.get_running_loop().create_task(self._run(consumer))

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        if self.enabled:
            await asyncio.to_thread(self.table.stop)

    async def _run(self, consumer: Any) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            self.check(consumer)
            self.follow_batch_size()

    def check(self, consumer: Any) -> bool:
        """Rebalance now if this member leads and the policy moved materially."""
        state = self.assignor.leader_state if self.assignor.is_leader else None
        pool = self.assignor.pool
        policy = self.assignor.policy  # what the leader planned by
        reason = self.trigger.check(state, policy.workers(pool), policy.model_ranges(pool))
        if reason is None:
            return False
        log.info("policy changed (%s): asking the group to rebalance", reason)
        self.rejoins += request_rejoin(consumer)
        return True


    def follow_batch_size(self) -> None:
        """Hand the worker its policy entry's batch size when it changes. A strategy
        recommends one (`memory-aware`, `latency-slo`) for a worker of one model on its
        device; without an entry, or with a recommendation withdrawn, the model's own
        `max_batch` again."""
        entry = self.table.entry(self.assignor.pool, self.worker_id)
        model = entry["model"] if entry is not None else None
        wanted = (model, entry["batch_size"]) if entry is not None and model else None
        if wanted == self.batch_size:
            return
        if self.batch_size is not None and (wanted is None or wanted[0] != self.batch_size[0]):
            self.on_batch_size(self.batch_size[0], None)
        if wanted is not None:
            self.on_batch_size(*wanted)
        self.batch_size = wanted


def _items_per_s(calibration: Calibration | None) -> float | None:
    return None if calibration is None else calibration["items_per_s"]
