"""Faust's stalled-stream checks in a sysinfo replica count from its latest rebalance: a
partition that came with a rebalance, its samples not read yet, is not a 15-line ERROR
because the replica started more than 5 minutes ago; one without progress for 5 minutes
after it came still is."""

from __future__ import annotations

import asyncio
import re
from time import monotonic
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP
from prometheus_client import CollectorRegistry

from inferstream.config import load_config
from inferstream.sysinfo.app import SysinfoApp, Topology
from inferstream.sysinfo.metrics import SysinfoMetrics


class Fetching:
    """What Faust reads of an aiokafka consumer fetching `tp`: records wait past its position
    (the highwater is ahead), a fetch request went out just now."""

    def __init__(self, tp: TP, now: float) -> None:
        state = SimpleNamespace(timestamp=now * 1000, highwater=10, position=4)
        assignment = SimpleNamespace(active=True, state_value=lambda _tp: state)
        self._fetcher = SimpleNamespace(
            _subscriptions=SimpleNamespace(subscription=SimpleNamespace(assignment=assignment)))


def stalled(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The partitions of Faust's ERRORs "Stream has not started processing TP(...)"."""
    found = (re.search(r"Stream has not started processing (TP\(.*?\))", r.getMessage())
             for r in caplog.records if r.levelname == "ERROR")
    return [match.group(1) for match in found if match]


def test_a_partition_that_came_with_a_rebalance_is_not_stalled_since_the_start(
        caplog: pytest.LogCaptureFixture) -> None:
    asyncio.run(a_rebalance_after_an_hour(caplog))  # Faust's app takes the running loop


async def a_rebalance_after_an_hour(caplog: pytest.LogCaptureFixture) -> None:
    config = load_config({}, {})
    app: Any = SysinfoApp(config, Topology(1, 1), SysinfoMetrics(CollectorRegistry())).app
    tp = TP(config.topic("sysinfo"), 0)
    thread = app.consumer._thread
    try:
        check_after_a_rebalance(app, thread, tp, caplog)
    finally:
        thread.thread_loop.close()  # the consumer thread's own loop, never run here


def check_after_a_rebalance(app: Any, thread: Any, tp: TP,
                            caplog: pytest.LogCaptureFixture) -> None:
    app.topics.acks_enabled_for = lambda topic: True  # as for an agent's topic once it runs
    thread.time_started = monotonic() - 3600  # a replica up for an hour
    app.on_rebalance_start()  # Faust forgets which streams took events ...
    app.on_rebalance_end()  # ... and at the end (recovery included) starts counting again
    now = monotonic()
    thread._consumer = Fetching(tp, now)

    thread.verify_event_path(now, tp)  # the samples waiting there, none read yet

    assert stalled(caplog) == []
    later = now + app.conf.stream_processing_timeout + 1
    thread._consumer = Fetching(tp, later)
    thread.verify_event_path(later, tp)  # still none read 5 minutes after the rebalance
    assert stalled(caplog) == [repr(tp)]
