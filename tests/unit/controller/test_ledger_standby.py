"""The controller's warm copy of the ledger: what it holds plus what is read from its offsets
on equals the whole ledger replayed, latest value per key, in the order written, without the
keys deleted since (the task entries of the jobs that ended)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from inferstream.client.client import Client
from inferstream.controller.metrics import ControllerMetrics
from inferstream.controller.replay import LedgerStandby, read_ledger
from inferstream.controller.replica import Controller
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.promtool import sample
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.pool import Responder
from tests.unit.support.records import settled
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
        running.wait_for(lambda: standby.copy([0, 1])[1] == {0: 4, 1: 1}, timeout_s=10)
        broker.produce(LEDGER, 0, b"job-a", b"a3")  # after the copy was taken: the tail
        held, start = standby.copy([0])
        assert held.records([0]) == [(b"a2", 0), (b"done-0", 0)] and start == {0: 4}
        assert read_ledger(CONFIG, LEDGER, [0], clients, start=start) == [(b"a3", 0)]
        assert read_ledger(CONFIG, LEDGER, [0], clients, start=start, onto=held) == [
            (b"done-0", 0), (b"a3", 0)]
        assert read_ledger(CONFIG, LEDGER, [0], clients) == [(b"done-0", 0), (b"a3", 0)]
    finally:
        standby.stop()


def test_before_its_first_catch_up_the_standby_holds_nothing() -> None:
    standby = LedgerStandby(CONFIG, LEDGER, MemoryKafkaClients(MemoryBroker()))
    held, start = standby.copy([0, 1])
    assert (held.records([0, 1]), start) == ([], {})


def test_a_tombstone_drops_its_key_from_the_standby(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    broker.produce(LEDGER, 0, b"job-a/0", b"done-0")
    broker.produce(LEDGER, 0, b"job-a/1", b"done-1")
    broker.produce(LEDGER, 0, b"job-a/0", None)  # the job ended: its task entries deleted
    broker.produce(LEDGER, 0, b"job-a/1", None)
    broker.produce(LEDGER, 0, b"job-a", b"a-completed")
    standby = LedgerStandby(CONFIG, LEDGER, clients)
    standby.start()
    try:
        running.wait_for(lambda: standby.copy([0])[1] == {0: 5}, timeout_s=10)
        assert standby.copy([0])[0].records([0]) == [(b"a-completed", 0)]
        assert standby.held() == 1
        broker.produce(LEDGER, 0, b"job-b/0", b"done-b0")
        broker.produce(LEDGER, 0, b"job-b/0", None)  # the last record: where a takeover reads on
        running.wait_for(lambda: standby.copy([0])[1] == {0: 7}, timeout_s=10)
        assert standby.held() == 1
    finally:
        standby.stop()


def test_a_replay_honours_the_tombstones_of_its_tail_and_before_compaction(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    """A job id run again after it ended (a retry after a cancel): the task entries of its
    first run are gone from every replay, whether the standby's copy holds them or the log."""
    broker.produce(LEDGER, 0, b"job-a/0", b"first-run-done-0")
    standby = LedgerStandby(CONFIG, LEDGER, clients)
    standby.start()
    try:
        running.wait_for(lambda: standby.copy([0])[1] == {0: 1}, timeout_s=10)
        held, start = standby.copy([0])
        broker.produce(LEDGER, 0, b"job-a/0", None)  # the first run cancelled, after the copy
        broker.produce(LEDGER, 0, b"job-a", b"a-cancelled")
        broker.produce(LEDGER, 0, b"job-a", b"a-active-again")
        again = [(b"a-active-again", 0)]
        assert read_ledger(CONFIG, LEDGER, [0], clients, start=start, onto=held) == again
        assert read_ledger(CONFIG, LEDGER, [0], clients) == again
    finally:
        standby.stop()


def test_consecutive_jobs_leave_one_ledger_entry_each_in_the_standby(
        clients: MemoryKafkaClients, make_controller: Callable[..., Controller],
        make_responder: Callable[..., Responder], running: Running) -> None:
    """Issue 30.1: a controller's memory is flat across jobs: each job that ended leaves its
    JOB entry in the standby's copy and in the compacted ledger, whatever its task count."""
    config = make_config()
    client = Client(config, CODEC, clients)
    make_responder()
    metrics = ControllerMetrics(CollectorRegistry())
    controller = running.controller(make_controller(hooks=metrics))
    for n in range(3):
        job = client.submit(MODEL, [f"item-{i}" for i in range(8)], chunk_size=2)
        running.wait_for(settled(clients.broker, config, jobs=n + 1))
        assert job.wait(timeout_s=5).ok_items == 8
    running.wait_for(caught_up(clients.broker, controller.standby))
    running.wait_for(lambda: sample(metrics.registry,
                                    "inferstream_controller_ledger_standby_entries") == 3)
    assert controller.standby.held() == 3
    latest = {r.key: r.value for r in clients.broker.records(LEDGER)}
    assert sum(value is not None for value in latest.values()) == 3  # after compaction
    assert sum(value is None for value in latest.values()) == 3 * 4  # every task's entry


def caught_up(broker: MemoryBroker, standby: LedgerStandby) -> Callable[[], bool]:
    """Whether the standby's copy is the ledger as compaction leaves it: it follows the
    ledger, so it can lag the job's end (an early JOB entry makes its count look final)."""
    def done() -> bool:
        """the standby holds the latest value of every ledger key, less the deleted"""
        latest = {r.key: r.value for r in broker.records(LEDGER)}
        parts = list(range(broker.partition_count(LEDGER)))
        held = sorted(value for value, _ in standby.copy(parts)[0].records(parts))
        return held == sorted(value for value in latest.values() if value is not None)
    return done
