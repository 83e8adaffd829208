"""The controller's warm copy of the ledger: what it holds plus what is read from its offsets
on equals the whole ledger replayed, latest value per key, in the order written."""

from __future__ import annotations

import time

from inferstream.config import Config
from inferstream.controller.replay import LedgerStandby, read_ledger
from inferstream.kafka.topics import topic_specs
from inferstream.testing import MemoryBroker, MemoryKafkaClients

CONFIG = Config(bootstrap_servers="mem:1", topic_prefix="t.", partitions=2, task_partitions=2)
LEDGER = CONFIG.topic("controller-ledger")


def test_held_records_and_the_tail_after_them_replay_the_ledger() -> None:
    broker = MemoryBroker()
    broker.create_topics(topic_specs(CONFIG))
    clients = MemoryKafkaClients(broker)
    for n in range(3):
        broker.produce(LEDGER, 0, b"job-a", b"a%d" % n)
    broker.produce(LEDGER, 0, b"job-a/0", b"done-0")
    broker.produce(LEDGER, 1, b"job-b", b"b0")
    standby = LedgerStandby(CONFIG, LEDGER, clients)
    standby.start()
    try:
        assert standby.caught_up.wait(10)
        deadline = time.monotonic() + 10
        while standby.records([0, 1])[1] != {0: 4, 1: 1}:
            assert time.monotonic() < deadline, standby.records([0, 1])
            time.sleep(0.02)
        broker.produce(LEDGER, 0, b"job-a", b"a3")  # after the copy was taken: the tail
        held, start = standby.records([0])
        assert held == [(b"a2", 0), (b"done-0", 0)] and start == {0: 4}
        tail = read_ledger(CONFIG, LEDGER, [0], clients, start=start)
        assert tail == [(b"a3", 0)]
    finally:
        standby.stop()


def test_before_its_first_catch_up_the_standby_holds_nothing() -> None:
    standby = LedgerStandby(CONFIG, LEDGER, MemoryKafkaClients(MemoryBroker()))
    assert standby.records([0, 1]) == ([], {})
