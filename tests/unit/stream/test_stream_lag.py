"""A stream member's lag per input topic (issue 29.1): in records over the partitions it owns,
and in seconds at the rate it commits records, measured over the last 30 s."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest

from inferstream.stream.metrics import StreamMetrics
from tests.unit.promtool import check_metrics, sample


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lag(metrics: StreamMetrics) -> tuple[float, float]:
    registry = metrics.registry
    return (sample(registry, "inferstream_stream_input_lag_records", topic="uploads"),
            sample(registry, "inferstream_stream_input_lag_seconds", topic="uploads"))


def committed(metrics: StreamMetrics, clock: Clock, records: int, seconds: float,
              lags: dict[int, int]) -> None:
    """`records` committed over `seconds`, a load report each second."""
    for _ in range(int(seconds)):
        clock.now += 1.0
        for _ in range(records // int(seconds)):
            metrics.after_stream_record("ok", 0.1)
        metrics.on_load(0, lags)


def test_the_lag_in_seconds_is_the_records_left_at_the_member_s_rate() -> None:
    clock = Clock()
    metrics = StreamMetrics(CollectorRegistry(), "s1", "stream-pool", "uploads", clock)
    metrics.on_load(0, {0: 300, 1: 100})
    records, seconds = lag(metrics)
    assert records == 400 and math.isnan(seconds)  # no rate measured yet: not known

    committed(metrics, clock, records=200, seconds=10, lags={0: 150, 1: 50})
    assert lag(metrics) == (200, 10.0)  # 20 records/s
    check_metrics(generate_latest(metrics.registry))


def test_an_idle_member_keeps_its_rate_and_a_stuck_one_never_catches_up() -> None:
    clock = Clock()
    metrics = StreamMetrics(CollectorRegistry(), "s1", "stream-pool", "uploads", clock)
    metrics.on_load(0, {0: 40})
    committed(metrics, clock, records=40, seconds=4, lags={0: 0})
    assert lag(metrics) == (0, 0.0)

    committed(metrics, clock, records=0, seconds=60, lags={0: 0})  # idle past the window
    metrics.on_load(0, {0: 30})  # a burst: the rate it last measured, 10 records/s
    assert lag(metrics) == (30, 3.0)

    committed(metrics, clock, records=0, seconds=31, lags={0: 30})  # nothing committed
    assert lag(metrics) == (30, math.inf)
