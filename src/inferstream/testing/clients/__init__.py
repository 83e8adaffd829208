"""`MemoryKafkaClients`: the `KafkaClients` factory of the in-memory transport."""

from __future__ import annotations

from typing import Any

from inferstream.kafka.clients import (
    AsyncConsumer,
    AsyncProducer,
    SyncConsumer,
    SyncProducer,
)
from inferstream.testing.broker import MemoryBroker
from inferstream.testing.clients.aio_consumer import MemoryAIOConsumer
from inferstream.testing.clients.aio_producer import MemoryAIOProducer
from inferstream.testing.clients.metadata import MemoryAdmin
from inferstream.testing.clients.sync_consumer import MemoryConsumer
from inferstream.testing.clients.sync_producer import MemoryProducer


class MemoryKafkaClients:
    """Builds clients of one MemoryBroker; `made` lists them in order, for tests to inspect."""

    def __init__(self, broker: MemoryBroker | None = None) -> None:
        self.broker = broker or MemoryBroker()
        self.made: list[object] = []

    def consumer(self, settings: dict[str, Any]) -> SyncConsumer:
        consumer = MemoryConsumer(self.broker, settings)
        self.made.append(consumer)
        return consumer

    def producer(self, settings: dict[str, Any]) -> SyncProducer:
        producer = MemoryProducer(self.broker, settings)
        self.made.append(producer)
        return producer

    def admin(self, settings: dict[str, Any]) -> MemoryAdmin:
        admin = MemoryAdmin(self.broker, settings)
        self.made.append(admin)
        return admin

    def aio_consumer(self, kwargs: dict[str, Any]) -> AsyncConsumer:
        consumer = MemoryAIOConsumer(self.broker, kwargs)
        self.made.append(consumer)
        return consumer

    def aio_producer(self, kwargs: dict[str, Any]) -> AsyncProducer:
        producer = MemoryAIOProducer(self.broker, kwargs)
        self.made.append(producer)
        return producer

    def of_type(self, kind: type[Any]) -> list[Any]:
        """The clients made so far that are `kind`s (MemoryProducer, MemoryAIOConsumer...)."""
        return [c for c in self.made if isinstance(c, kind)]
