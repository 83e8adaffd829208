"""Model performance over a sliding window, fed by the pipeline's `after_batch` hook, and the
`models` collector that reports it.

Counts go into one-second buckets and batch latencies into a bounded reservoir, so that
memory and the cost of a sample stay flat however fast the model runs.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass

from inferstream.schemas.records import ModelPerformance, PerformanceFields
from inferstream.serving.collectors.base import Performance, SampleContext, ServedModel
from inferstream.serving.hooks import WorkerHooks

#: The shortest window; with a longer sysinfo interval the window is 5 intervals.
MIN_WINDOW_S = 10.0
#: Batch latencies kept per model for the percentiles (the latest ones).
LATENCY_RESERVOIR = 1024


@dataclass
class _Bucket:
    second: int
    items: int = 0
    batches: int = 0
    seconds: float = 0.0
    #: items answered, and the batch loop's wall time, in batches taken with a batch waiting
    cycle_items: int = 0
    cycle_seconds: float = 0.0


class ModelWindow:
    """One model's batches over the last `window_s` seconds (monotonic clock)."""

    def __init__(self, window_s: float, started: float) -> None:
        self.window_s = window_s
        self.started = started
        self._buckets: deque[_Bucket] = deque()
        self._latencies: deque[tuple[float, float]] = deque(maxlen=LATENCY_RESERVOIR)
        #: the batch loop's wall time per item in the latest window that had backlogged
        #: batches: kept through windows without any, so that a worker fed less than a batch
        #: at a time is not planned at its forward pass's speed again
        self.backlogged_item_s: float | None = None

    def add(self, size: int, seconds: float, ended: float) -> None:
        bucket = self._bucket(ended)
        bucket.items += size
        bucket.batches += 1
        bucket.seconds += seconds
        self._latencies.append((ended, seconds))

    def add_cycle(self, size: int, seconds: float, ended: float) -> None:
        bucket = self._bucket(ended)
        bucket.cycle_items += size
        bucket.cycle_seconds += seconds

    def _bucket(self, ended: float) -> _Bucket:
        second = int(ended)
        if not self._buckets or self._buckets[-1].second != second:
            self._buckets.append(_Bucket(second))
        return self._buckets[-1]

    def performance(self, model: ServedModel, now: float) -> ModelPerformance:
        since = now - self.window_s
        while self._buckets and self._buckets[0].second + 1 <= since:
            self._buckets.popleft()
        items = sum(b.items for b in self._buckets)
        batches = sum(b.batches for b in self._buckets)
        busy_s = sum(b.seconds for b in self._buckets)
        cycle_items = sum(b.cycle_items for b in self._buckets)
        if cycle_items:
            self.backlogged_item_s = sum(b.cycle_seconds for b in self._buckets) / cycle_items
        latencies = sorted(s for ended, s in self._latencies if ended > since)
        # The oldest bucket may reach up to a second before the window: count from there.
        start = min(self._buckets[0].second, since) if self._buckets else since
        span = max(now - max(start, self.started), 1e-6)
        return ModelPerformance(
            model=model.name, version=model.version, items=items, items_per_s=items / span,
            batch_latency_seconds_p50=percentile(latencies, 0.50),
            batch_latency_seconds_p95=percentile(latencies, 0.95),
            item_seconds=item_seconds(items, busy_s, self.backlogged_item_s),
            mean_batch_size=items / batches if batches else None)

    def latencies(self, now: float) -> list[float]:
        return [s for ended, s in self._latencies if ended > now - self.window_s]


class PerformanceWindows(WorkerHooks):
    """Per-model windows, one per model and version served, kept by `after_batch` on the
    worker's event loop."""

    def __init__(self, window_s: float = MIN_WINDOW_S) -> None:
        self.window_s = window_s
        self._windows: dict[ServedModel, ModelWindow] = {}

    def after_batch(self, model: str, size: int, seconds: float,
                    version: str | None = None) -> None:
        self.record(ServedModel(model, version), size, seconds, time.monotonic())

    def after_batch_cycle(self, model: str, size: int, seconds: float,
                          version: str | None = None) -> None:
        self.record_cycle(ServedModel(model, version), size, seconds, time.monotonic())

    def record_cycle(self, model: ServedModel, size: int, seconds: float, ended: float
                     ) -> None:
        """One backlogged batch of `model` (`after_batch_cycle`) that ended at `ended`."""
        self._window(model, seconds, ended).add_cycle(size, seconds, ended)

    def record(self, model: ServedModel, size: int, seconds: float, ended: float) -> None:
        """One batch of `model` that ended at `ended` (monotonic clock)."""
        self._window(model, seconds, ended).add(size, seconds, ended)

    def _window(self, model: ServedModel, seconds: float, ended: float) -> ModelWindow:
        window = self._windows.get(model)
        if window is None:  # loaded after the first sample: its window opens with this batch
            window = self._windows[model] = ModelWindow(self.window_s, ended - seconds)
        return window

    def snapshot(self, served: tuple[ServedModel, ...], now: float | None = None
                 ) -> Performance:
        """The performance of every model in `served` over the window ending `now`."""
        now = time.monotonic() if now is None else now
        for gone in set(self._windows) - set(served):
            del self._windows[gone]  # unloaded
        windows = [(m, self._windows.setdefault(m, ModelWindow(self.window_s, now)))
                   for m in served]
        models = tuple(window.performance(m, now) for m, window in windows)
        latencies = sorted(s for _, window in windows for s in window.latencies(now))
        return Performance(models=models, items_per_s=sum(m["items_per_s"] for m in models),
                           batch_latency_seconds_p50=percentile(latencies, 0.50),
                           batch_latency_seconds_p95=percentile(latencies, 0.95))


def item_seconds(items: int, forward_s: float, backlogged_item_s: float | None
                 ) -> float | None:
    """Seconds an item over a window: the batch loop's wall time per item in batches taken
    with a batch or more waiting (what the worker takes when it has work; this window's, else
    the latest window's that had such batches), where that is longer than the forward pass's
    time per item in this window, else the forward pass's (a worker never backlogged since it
    started: the best known). None without items."""
    if not items:
        return None
    forward = forward_s / items
    return forward if backlogged_item_s is None else max(forward, backlogged_item_s)


def percentile(ordered: list[float], q: float) -> float | None:
    """The nearest-rank `q` quantile of an ascending list; None when it is empty."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class ModelPerformanceCollector:
    """`models` (per served model), `throughput_items_per_s` and the batch latency
    percentiles of the whole worker, all over the window."""

    name = "models"

    def collect(self, context: SampleContext) -> PerformanceFields:
        perf = context.performance
        return PerformanceFields(models=list(perf.models),
                                 throughput_items_per_s=perf.items_per_s,
                                 latency_seconds_p50=perf.batch_latency_seconds_p50,
                                 latency_seconds_p95=perf.batch_latency_seconds_p95)
