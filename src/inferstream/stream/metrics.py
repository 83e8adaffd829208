"""A stream member's metrics: the data path's, and records, latency and lag."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferstream.metrics import set_by_partition
from inferstream.serving.metrics import ServingMetrics
from inferstream.supervise.child import count_restarts

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class StreamMetrics(ServingMetrics):
    """A stream member's metrics: the data path's, and records, latency and lag."""

    def __init__(self, registry: CollectorRegistry, worker: str = "", pool: str = "") -> None:
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

    def after_stream_record(self, status: str, latency_s: float | None) -> None:
        self.records.labels(status).inc()
        if latency_s is not None:
            self.latency.observe(max(0.0, latency_s))

    def on_load(self, in_flight_items: int, lags: dict[int, int]) -> None:
        super().on_load(in_flight_items, lags)
        self._stream_lagging = set_by_partition(self.stream_lag, self._stream_lagging, lags)
