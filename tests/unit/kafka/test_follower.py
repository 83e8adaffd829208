"""A topic follower reads to the end with short fetch waits, then follows with long ones from
where the first read stopped: every record applied once, the later ones too."""

from __future__ import annotations

import threading
import time
from typing import Any

from inferstream.config import Config
from inferstream.kafka.clients import SyncConsumer
from inferstream.kafka.follower import TopicFollower
from inferstream.kafka.reader import FOLLOW_FETCH_WAIT_MS, READ_TO_END_FETCH_WAIT_MS
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import make_config


class Waits(MemoryKafkaClients):
    """Keeps the fetch wait each consumer was made with."""

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker)
        self.waits: list[int] = []

    def consumer(self, settings: dict[str, Any]) -> SyncConsumer:
        self.waits.append(settings["fetch.wait.max.ms"])
        return super().consumer(settings)


class Table(TopicFollower):
    def __init__(self, config: Config, clients: MemoryKafkaClients) -> None:
        super().__init__(config, "t.table", "table", clients)
        self.applied: list[tuple[bytes | None, bytes]] = []
        self.lock = threading.Lock()

    def apply(self, key: bytes | None, value: bytes) -> None:
        with self.lock:
            self.applied.append((key, value))

    def until(self, count: int) -> list[tuple[bytes | None, bytes]]:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.applied) >= count:
                    time.sleep(0.05)  # a record applied twice would show by now
                    return sorted(self.applied)
            time.sleep(0.01)
        raise AssertionError(f"applied {self.applied}, expected {count}")


def test_a_follower_catches_up_quickly_then_follows_from_where_it_stopped(
        broker: MemoryBroker) -> None:
    broker.create_topic("t.table", 3)
    broker.produce("t.table", 0, b"a", b"1")
    broker.produce("t.table", 0, b"a", None)  # a tombstone: its offset counts too
    broker.produce("t.table", 1, b"b", b"2")  # partition 2: nothing yet
    clients = Waits(broker)
    table = Table(make_config(), clients)
    table.start()
    try:
        assert table.caught_up.wait(10)
        assert table.until(2) == [(b"a", b"1"), (b"b", b"2")]
        broker.produce("t.table", 0, b"c", b"3")
        broker.produce("t.table", 2, b"d", b"4")
        assert table.until(4) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")]
    finally:
        table.stop()
    assert clients.waits == [READ_TO_END_FETCH_WAIT_MS, FOLLOW_FETCH_WAIT_MS]
