"""`partition_counts` as a stream member's rebalance asks it: bounded also where its probe
cannot start (a SIGSTOPped bootstrap broker held the rebalance for aiokafka's request timeout,
40 s a broker), the probe stopped whatever happened."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from inferstream.config import Config
from inferstream.kafka.errors import KafkaSetupError
from inferstream.serving.source import partition_counts


class HungProbe:
    """A producer whose bootstrap never answers."""

    def __init__(self) -> None:
        self.stopped = False

    async def start(self) -> None:
        await asyncio.Event().wait()

    async def stop(self) -> None:
        self.stopped = True


class Clients:
    def __init__(self) -> None:
        self.probe = HungProbe()

    def aio_producer(self, _kwargs: dict[str, Any]) -> HungProbe:
        return self.probe


def test_a_probe_that_cannot_start_is_given_up_and_stopped() -> None:
    clients = Clients()

    async def count() -> dict[str, int]:
        return await asyncio.wait_for(partition_counts(
            Config(), clients, ["in", "out"], 5.0, start_timeout_s=0.05), 10)  # type: ignore[arg-type]

    with pytest.raises(KafkaSetupError, match=r"^no broker answered within 0.05 s for the "
                                              r"partition counts of in, out$"):
        asyncio.run(count())
    assert clients.probe.stopped
