"""A reader's librdkafka settings: its prefetch queue is bounded (memory of results/submit)."""

from __future__ import annotations

from typing import Any

from inferstream.kafka.reader import READER_PREFETCH_KB, reader_consumer
from tests.unit.support.memory import make_config


class Recording:
    """Stands in for the client factories: keeps the consumer configuration asked for."""

    def __init__(self) -> None:
        self.asked: dict[str, Any] = {}

    def consumer(self, conf: dict[str, Any]) -> Any:
        self.asked = conf
        return object()


def test_a_reader_prefetches_a_bounded_amount() -> None:
    clients = Recording()
    reader_consumer(make_config(), clients)  # type: ignore[arg-type]
    assert clients.asked["queued.max.messages.kbytes"] == READER_PREFETCH_KB <= 16384
    assert clients.asked["enable.partition.eof"] is True
