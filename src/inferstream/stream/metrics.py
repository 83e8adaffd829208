"""A stream member's metrics: the data path's, and records, latency and lag."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferstream.metrics import set_by_partition
from inferstream.serving.metrics import ServingMetrics
from inferstream.supervise.child import count_restarts

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
#: Seconds over which a member's rate (records committed per second) is measured.
RATE_WINDOW_S = 30.0


class StreamMetrics(ServingMetrics):
    """A stream member's metrics: the data path's, and records, latency and lag (of input
    `topic`, in records and in seconds at the member's rate as `clock` measures it)."""

    def __init__(self, registry: CollectorRegistry, worker: str = "", pool: str = "",
                 topic: str = "", clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(registry, worker, pool)
        self.restarts = count_restarts(registry, "stream")
        self.records = Counter(
            "inferstream_stream_records_total",
            "Input records whose outcome was committed, by status (ok, error, dead_letter)",
            ["status"], registry=registry,
        )
        self.latency = Histogram(
            "inferstream_stream_latency_seconds",
            "Input record timestamp to the commit of its output", buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.stream_lag = Gauge(
            "inferstream_stream_lag_records",
            "Committed input records of an owned partition with no output yet", ["partition"],
            registry=registry,
        )
        self._stream_lagging: set[str] = set()
        self.input_lag = Gauge(
            "inferstream_stream_input_lag_records",
            "Committed records of the input topic with no output yet, over the partitions "
            "this member owns", ["topic"], registry=registry).labels(topic)
        self.input_lag_seconds = Gauge(
            "inferstream_stream_input_lag_seconds",
            "The input lag in seconds at this member's rate: records committed per second "
            "over its last 30 s with records to work on (+Inf where it committed none then, "
            "NaN before it had any)", ["topic"], registry=registry).labels(topic)
        self._clock = clock
        self._committed = 0
        #: the last load report: (clock, records committed by then, lag then)
        self._last: tuple[float, int, int] | None = None
        #: (seconds, records committed) of each interval between two load reports in which
        #: the member had records to work on, the last RATE_WINDOW_S of them
        self._busy: deque[tuple[float, int]] = deque()

    def after_stream_record(self, status: str, latency_s: float | None) -> None:
        self._committed += 1
        self.records.labels(status).inc()
        if latency_s is not None:
            self.latency.observe(max(0.0, latency_s))

    def on_load(self, in_flight_items: int, lags: dict[int, int]) -> None:
        super().on_load(in_flight_items, lags)
        self._stream_lagging = set_by_partition(self.stream_lag, self._stream_lagging, lags)
        lag = sum(lags.values())
        rate = self._measure_rate(lag)
        self.input_lag.set(lag)
        if lag == 0:
            self.input_lag_seconds.set(0.0)
        else:
            self.input_lag_seconds.set(math.nan if rate is None else
                                       lag / rate if rate > 0 else math.inf)

    def _measure_rate(self, lag: int) -> float | None:
        """Records committed per second over the last `RATE_WINDOW_S` in which the member
        had records to work on (an idle member's rate says nothing of its speed); None
        before any such interval."""
        now = self._clock()
        if self._last is not None:
            since, before, lag_then = self._last
            done = self._committed - before
            if done or lag_then:
                self._busy.append((now - since, done))
            while len(self._busy) > 1 and sum(s for s, _ in self._busy) > RATE_WINDOW_S:
                self._busy.popleft()
        self._last = (now, self._committed, lag)
        elapsed = sum(seconds for seconds, _ in self._busy)
        return sum(done for _, done in self._busy) / elapsed if elapsed > 0 else None
