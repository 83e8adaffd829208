"""A worker's start-up announcement (issue 26.3), on the in-memory broker: STARTING with its
models before they load and again every interval, SERVING once it joined its group, STOPPED at
the end; what the controller's table of them makes of each."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from inferstream.controller.announcements import WorkerAnnouncements
from inferstream.schemas.records import WorkerAnnouncement, WorkerState, now_ms, read_record
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.testing.clients.sync_producer import MemoryProducer
from inferstream.worker.announce import StartAnnouncer
from tests.unit.support.memory import CODEC, make_config, new_broker
from tests.unit.support.running import TIMEOUT_S

LITE0 = "efficientnet_lite0"
CONFIG = make_config(worker={"models": (LITE0,), "announce_interval_s": 0.05})


def said(broker: MemoryBroker) -> list[tuple[str, WorkerState]]:
    return [(a["worker"], a["state"]) for a in (
        read_record(CODEC, value, WorkerAnnouncement) for value in broker.values("t.workers"))]


def table_of(broker: MemoryBroker) -> WorkerAnnouncements:
    table = WorkerAnnouncements(CONFIG, codec=CODEC)
    for value in broker.values("t.workers"):
        table.apply(None, value)
    return table


def eventually(condition: Callable[[], bool], timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.01)


def test_members_are_announced_starting_until_each_joins_then_stopped() -> None:
    broker = new_broker(CONFIG)
    announcer = StartAnnouncer(CONFIG, ["w-0", "w-1"], MemoryKafkaClients(broker), CODEC)
    announcer.start()
    try:
        assert said(broker) == [("w-0", WorkerState.STARTING), ("w-1", WorkerState.STARTING)]
        assert table_of(broker).starting("default", LITE0, now_ms()) == ["w-0", "w-1"]
        assert table_of(broker).starting("default", "alexnet", now_ms()) == []

        announcer.hooks("w-0").after_rebalance()  # its first assignment
        eventually(lambda: ("w-0", WorkerState.SERVING) in said(broker))
        eventually(lambda: said(broker).count(("w-1", WorkerState.STARTING)) >= 3)
        assert said(broker).count(("w-0", WorkerState.STARTING)) < 3  # no longer announced
    finally:
        announcer.stop()
    assert said(broker)[-2:] == [("w-0", WorkerState.STOPPED), ("w-1", WorkerState.STOPPED)]
    assert table_of(broker).starting("default", LITE0, now_ms()) == []


def test_an_announcement_is_stale_after_three_intervals() -> None:
    broker = new_broker(CONFIG)
    announcer = StartAnnouncer(CONFIG, ["w-0"], MemoryKafkaClients(broker), CODEC)
    announcer.start()
    announcer.stop()
    table = WorkerAnnouncements(CONFIG, codec=CODEC)
    first = broker.values("t.workers")[0]  # STARTING, not the STOPPED after it
    table.apply(None, first)
    sent = read_record(CODEC, first, WorkerAnnouncement)["timestamp"]
    assert table.starting("default", LITE0, sent + 100) == ["w-0"]
    assert table.starting("default", LITE0, sent + 200) == []  # 3 x 0.05 s: it died starting


def test_no_announcement_with_an_interval_of_zero() -> None:
    broker = new_broker(CONFIG)
    quiet = make_config(worker={"models": (LITE0,), "announce_interval_s": 0})
    announcer = StartAnnouncer(quiet, ["w-0"], MemoryKafkaClients(broker), CODEC)
    announcer.start()
    announcer.stop()
    assert said(broker) == []


def test_an_announcer_whose_workers_joined_still_polls_its_producer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka's log lines wait in the producer's queue for a poll: the announcer, idle
    once its workers joined, stopped polling, and a broker outage's "Connect ... failed"
    lines came out minutes later, all at the worker's stop, under the stop's time."""
    broker = new_broker(CONFIG)
    clients = MemoryKafkaClients(broker)
    announcer = StartAnnouncer(CONFIG, ["w-0"], clients, CODEC)
    announcer.start()
    try:
        (producer,) = clients.of_type(MemoryProducer)
        polls = [0]
        real_poll = producer.poll

        def counted(timeout: float = -1) -> int:
            polls[0] += 1
            return real_poll(timeout)
        monkeypatch.setattr(producer, "poll", counted)
        announcer.hooks("w-0").after_rebalance()
        eventually(lambda: ("w-0", WorkerState.SERVING) in said(broker))
        served = polls[0]
        eventually(lambda: polls[0] > served)  # within LOG_POLL_S (1 s)
    finally:
        announcer.stop()
    assert said(broker)[-1] == ("w-0", WorkerState.STOPPED)
