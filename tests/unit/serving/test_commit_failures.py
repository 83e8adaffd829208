"""A commit that fails with what no committer expects (an error outside Kafka's) gives its
partition up: the tasks it took off the queue are redone from the committed offset, never
passed over by the commit of the tasks behind them."""

from __future__ import annotations

import asyncio
import ssl
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from inferstream.kafka.clients import Outgoing
from inferstream.kafka.errors import PartitionLostError
from inferstream.serving.committers.base import PendingTask
from inferstream.serving.committers.exactly_once import TransactionalCommitter
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import make_config, new_broker

TP = TopicPartition("t.tasks.default", 0)
GROUP = "g"


class Owner:
    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker

    def owns(self, tp: Any) -> bool:
        return True

    async def committed_offset(self, tp: Any) -> int | None:
        return self.broker.committed_offset(GROUP, tp.topic, tp.partition)

    async def commit_offset(self, tp: Any, offset: int) -> None:
        raise AssertionError("no offset commit outside a transaction")

    def transaction_failed(self, tp: Any, fenced: bool) -> None:
        pass


def answered(committer: TransactionalCommitter, offset: int) -> None:
    task = PendingTask(SimpleNamespace(offset=offset))  # type: ignore[arg-type]
    committer.append(task)
    committer.finish(task, [Outgoing("t.results", 0, b"j", b"result %d" % offset)])


def test_a_commit_that_raises_an_unexpected_error_gives_its_partition_up() -> None:
    """The transaction's outcome is unknown (a timeout) and the producer that is to find
    it out cannot be made: its TLS key and certificate, read while a rotation replaced them,
    do not match (ssl.SSLError, not a KafkaError). That error left the committer in service
    with the task it had taken off its queue neither committed nor given up: the next
    commit, of the task behind it, committed the offset past both, and the first task's
    items were never answered."""
    config = make_config()
    broker = new_broker(config)
    committer = TransactionalCommitter(config, MemoryKafkaClients(broker), TP, GROUP,
                                       Owner(broker))

    async def scenario() -> list[BaseException]:
        await committer.start()
        broker.inject(committer.transactional_id, "commit", fail="before")
        broker.inject(committer.transactional_id, "init",
                      error=ssl.SSLError("[X509: KEY_VALUES_MISMATCH] key values mismatch"))
        errors = []
        for offset in (0, 1):  # the second: the task behind, finished since
            answered(committer, offset)
            try:
                await committer.commit_ready()
            except Exception as exc:
                errors.append(exc)
        await committer.close()
        return errors

    errors = asyncio.run(scenario())
    assert broker.committed_offset(GROUP, TP.topic, TP.partition) is None  # both redone
    assert [type(e) for e in errors] == [PartitionLostError]  # the worker retakes it
    assert committer.lost
