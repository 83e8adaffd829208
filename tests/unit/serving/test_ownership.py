"""Which partitions a worker holds (`Ownership`), with a fake consumer: a take that fails
does not leave the worker believing a rebalance is still under way."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from inferstream.serving.ownership import Ownership


class Committer:
    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.lost = False

    async def start(self) -> None:
        pass

    async def close(self, wait_s: float = 10.0) -> None:
        self.lost = True


class Consumer:
    """Assigned `held`; no committed offsets; the first position asked for is not found in
    time (the broker that leads the partition restarting: `Ownership` waits 30 s)."""

    def __init__(self, held: set[TopicPartition]) -> None:
        self.held = held
        self.asked = 0

    def assignment(self) -> set[TopicPartition]:
        return self.held

    async def committed(self, tp: TopicPartition) -> int | None:
        return None

    async def seek_to_beginning(self, tp: TopicPartition) -> None:
        pass

    async def position(self, tp: TopicPartition) -> int:
        self.asked += 1
        if self.asked == 1:
            raise TimeoutError
        return 0


def test_a_partition_whose_take_fails_is_taken_later_and_the_rebalance_ends() -> None:
    """A rebalance's take of a partition that raised (its position not found while a broker
    restarts) left `rebalancing` set until the next rebalance: the worker then judged every
    partition not its own (a commit of unknown outcome gave its partition up) and took
    none back, its records fetched and dropped. The rebalance ends whatever a take does,
    and the partition that failed is taken back later."""
    first, second = TopicPartition("t.tasks", 0), TopicPartition("t.tasks", 1)
    changes: list[int] = []

    async def rebalance() -> tuple[bool, bool]:
        consumer = Consumer({first, second})
        owner = Ownership(consumer, Committer, changes.append,  # type: ignore[arg-type]
                          asyncio.Event(), heartbeat_s=0.01)
        owner.rebalancing = True  # as the revoke before it leaves it
        await owner.acquire({first, second})
        ended = not owner.rebalancing
        await asyncio.sleep(0.2)
        held = owner.active(first) is not None and owner.active(second) is not None
        await owner.close()
        return ended, held

    ended, held = asyncio.run(rebalance())
    assert ended
    assert held
    assert changes and changes[0] == 1  # told of the one partition the rebalance gave
