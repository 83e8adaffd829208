"""Which partitions a worker holds (`Ownership`), with a fake consumer: a take that fails
does not leave the worker believing a rebalance is still under way."""

from __future__ import annotations

import asyncio
import ssl

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


class SlowConsumer(Consumer):
    """Whose first `failures` positions asked for are not found in time."""

    def __init__(self, held: set[TopicPartition], failures: int) -> None:
        super().__init__(held)
        self.failures = failures

    async def position(self, tp: TopicPartition) -> int:
        self.asked += 1
        if self.asked <= self.failures:
            raise TimeoutError
        return 0


class UnreadableCommitter(Committer):
    """Whose producer's first `starts` fail as a TLS key read mid-rotation does."""

    starts = 0

    async def start(self) -> None:
        UnreadableCommitter.starts -= 1
        if UnreadableCommitter.starts >= 0:
            raise ssl.SSLError("[SSL] PEM lib (_ssl.c:3900)")


def held_after(consumer: Consumer, committer: type[Committer]) -> set[int]:
    """The partitions of `consumer`'s assignment read from where they start, 0.5 s after a
    rebalance that assigned them."""
    async def rebalance() -> set[int]:
        owner = Ownership(consumer, committer, lambda _: None,  # type: ignore[arg-type]
                          asyncio.Event(), heartbeat_s=0.01)
        owner.rebalancing = True
        await owner.acquire(set(consumer.held))
        await asyncio.sleep(0.5)
        held = {tp.partition for tp in owner.offsets if owner.active(tp) is not None}
        await owner.close()
        return held
    return asyncio.run(rebalance())


def test_a_partition_whose_retake_fails_too_is_taken_again_later() -> None:
    """A take that raised is taken back later; a take back that raised as well (the broker
    still restarting) ended its task with the error, no one retrieving it, and left the
    partition held but never sought to where it starts."""
    consumer = SlowConsumer({TopicPartition("t.tasks", 0)}, failures=2)
    assert held_after(consumer, Committer) == {0}
    assert consumer.asked == 3


def test_a_producer_that_fails_to_start_in_a_way_outside_kafka_is_started_again() -> None:
    """A producer's start that raised what is not Kafka's (a TLS key and certificate read
    mid-rotation, as when a commit's failure makes the producer again) is tried again later,
    where its take back raised it and took the partition no more."""
    UnreadableCommitter.starts = 2
    assert held_after(Consumer({TopicPartition("t.tasks", 0)}), UnreadableCommitter) == {0}
