"""The sysinfo publisher's own producer: one that failed to deliver a sample is replaced, so that
samples flow again once the broker takes them (a worker's samples had stopped for good after
broker restarts while the worker went on serving, and the policy gave it no partitions)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.errors import OutOfOrderSequenceNumber

from inferstream.kafka.clients import AsyncProducer
from inferstream.serving.samples import SysInfoPublisher
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import CODEC, make_config


class Desynced:
    """An idempotent producer one of whose batches the broker never got (its partition had
    no leader after a broker restart): the leader refuses every later batch of its producer
    id as out of order, and aiokafka (0.14) never takes a new id."""

    def __init__(self) -> None:
        self.sent = 0
        self.stopped = False

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                   **_: Any) -> asyncio.Future[Any]:
        self.sent += 1
        refused: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        refused.set_exception(OutOfOrderSequenceNumber())
        return refused


class FirstDesynced(MemoryKafkaClients):
    """The first producer made is `desynced`; the next ones are the broker's own."""

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker)
        self.desynced = Desynced()

    def aio_producer(self, kwargs: dict[str, Any]) -> AsyncProducer:
        if not self.made:
            self.made.append(self.desynced)
            return self.desynced  # type: ignore[return-value]
        return super().aio_producer(kwargs)


def test_a_producer_that_failed_to_deliver_a_sample_is_replaced_and_samples_flow_again(
        broker: MemoryBroker) -> None:
    config = make_config(worker={"sysinfo_interval_s": 1.0, "calibration_items": 0})
    clients = FirstDesynced(broker)
    publisher = SysInfoPublisher(config, "w7", clients, CODEC)

    async def three_samples() -> None:
        for _ in range(3):
            await publisher.publish_once()
            await asyncio.sleep(0)  # the delivery's callback runs
        await publisher.stop()
    asyncio.run(three_samples())

    assert clients.desynced.sent == 1 and clients.desynced.stopped
    assert (publisher.published, publisher.failed) == (2, 1)
    assert [r.key for r in broker.records(config.topic("sysinfo"))] == [b"w7", b"w7"]
