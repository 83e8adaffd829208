"""The controller's warm copy of the ledger: what it holds plus what is read from its offsets
on equals the whole ledger replayed, latest value per key, in the order written."""

from __future__ import annotations

from inferstream.controller.replay import LedgerStandby, read_ledger
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import make_config
from tests.unit.support.running import Running

CONFIG = make_config()
LEDGER = CONFIG.topic("controller-ledger")


def test_held_records_and_the_tail_after_them_replay_the_ledger(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    for n in range(3):
        broker.produce(LEDGER, 0, b"job-a", b"a%d" % n)
    broker.produce(LEDGER, 0, b"job-a/0", b"done-0")
    broker.produce(LEDGER, 1, b"job-b", b"b0")
    standby = LedgerStandby(CONFIG, LEDGER, clients)
    standby.start()
    try:
        assert standby.caught_up.wait(10)
        running.wait_for(lambda: standby.records([0, 1])[1] == {0: 4, 1: 1}, timeout_s=10)
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
