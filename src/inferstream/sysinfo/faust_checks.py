"""Faust's checks for a stalled stream, counted from the replica's latest rebalance.

Every 7 s Faust's consumer (faust-streaming 0.15, `AIOKafkaConsumerThread.verify_event_path`
in faust/transport/drivers/aiokafka.py) looks at each assigned partition and logs a 15-line
ERROR ("Stream has not started processing TP(...) (started 23.34 minutes ago)", or "Aiokafka
has not sent fetch request for TP(...) since start", "Has not committed TP(...) at all since
worker start") where nothing happened on it "since start", once the worker is older than
`stream_processing_timeout` (300 s). What it checks is cleared at each rebalance (the
monitor's record of the events each stream took in, the fetcher's state of a partition new
here), but "since start" stays the process's start: a replica up for 5 minutes logged the
error for a partition it got in a rebalance a quarter of a second earlier, the samples
waiting there not read yet (seen at the kill -9 of the replica beside it;
https://github.com/faust-streaming/faust/issues/629 is the fetch request's variant). Here the
start is moved to the end of each rebalance, when Faust clears the rest, so a partition is
called stalled 300 s after it was assigned without progress, as Faust means it. Drop this
once faust-streaming counts from the assignment.
"""

from __future__ import annotations

import logging
from time import monotonic
from typing import Any

from faust.sensors.base import Sensor


class ChecksSinceRebalance(Sensor):
    """A Faust sensor: at the end of each rebalance (its recovery included), the consumer
    thread's start, which Faust's stalled-stream checks count from, becomes now."""

    #: a mode service: its "Starting..." and "Stopping..." go where Faust's own lines go
    #: (quiet but for warnings, `sysinfo.run`)
    logger = logging.getLogger("faust.sensors.checks_since_rebalance")

    def on_rebalance_end(self, app: Any, state: Any) -> None:
        thread = getattr(app.consumer, "_thread", None)  # Faust's consumer thread
        if thread is not None:
            thread.time_started = monotonic()
