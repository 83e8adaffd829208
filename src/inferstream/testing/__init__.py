"""An in-memory Kafka for unit tests: topics, consumer groups and transactions.

    broker = MemoryBroker()
    broker.create_topic("t.tasks.default", partitions=4)
    worker = new_worker(config, model, clients=MemoryKafkaClients(broker))

`MemoryKafkaClients` implements `inferstream.kafka.clients.KafkaClients`, so the
worker, controller and client run on it unchanged (the shape of dramatiq's `StubBroker`),
the worker's `PolicyAssignor` included (groups run client-side assignor objects as aiokafka does).
Faults are injected on the broker: `inject` (a transactional call fails, optionally after
taking effect, or stalls), `fence` (a successor takes a transactional id) and
`expire_member` (a session times out).
"""

from inferstream.testing.broker import MemoryBroker
from inferstream.testing.clients import MemoryKafkaClients
from inferstream.testing.errors import Fault
from inferstream.testing.log import StoredRecord

__all__ = ["Fault", "MemoryBroker", "MemoryKafkaClients", "StoredRecord"]
