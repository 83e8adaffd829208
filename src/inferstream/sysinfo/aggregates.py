"""Windowed aggregates per (worker, model and version): smoothed throughput and latency of busy
samples.

A sample in which the model finished no item says nothing about how fast it is, so it moves
the window but not the smoothed figures: an idle worker keeps its measured capacity.
Values are plain JSON (they live in a Faust table and its changelog).
"""

from __future__ import annotations

from typing import TypedDict

from inferstream.schemas.records import ModelPerformance


class ModelAggregate(TypedDict):
    worker: str
    model: str
    samples: int
    busy_samples: int
    #: Items the model finished since the app first saw it.
    items_total: int
    #: Items/s, EWMA over busy samples; None until the first busy one.
    ewma_items_per_s: float | None
    latency_seconds_p95: float | None
    mean_batch_size: float | None
    #: Seconds per item in the latest busy sample (`ModelPerformance.item_seconds`, the
    #: worker's while it had work): not smoothed again, the worker's window already averages
    #: 10 s or more, and the capacity taken from it must follow a slowdown within a few
    #: samples.
    item_seconds: float | None
    #: [timestamp_ms, items_per_s] of the samples of the last window, oldest first.
    window: list[list[float]]
    updated_at: int


def aggregate_key(worker: str, model: str) -> str:
    """The table key of (worker, model): a `model_ref`, NAME:VERSION for a repository model's
    version; `|` cannot appear in a model's name."""
    return f"{worker}|{model}"


def ewma(previous: float | None, value: float | None, alpha: float) -> float | None:
    """Exponentially weighted mean; a missing side yields the other."""
    if value is None:
        return previous
    if previous is None:
        return value
    return alpha * value + (1 - alpha) * previous


def fold(previous: ModelAggregate | None, worker: str, perf: ModelPerformance,
         timestamp_ms: int, alpha: float, window_s: float) -> ModelAggregate:
    """The aggregate after one more sample of `perf`, taken at `timestamp_ms`."""
    agg = previous or _empty(worker, perf["model"])
    busy = perf["items"] > 0
    cutoff = timestamp_ms - window_s * 1000
    window = [p for p in agg["window"] if p[0] > cutoff]
    window.append([float(timestamp_ms), perf["items_per_s"]])
    return ModelAggregate(
        worker=worker, model=perf["model"], samples=agg["samples"] + 1,
        busy_samples=agg["busy_samples"] + int(busy),
        items_total=agg["items_total"] + perf["items"],
        ewma_items_per_s=ewma(agg["ewma_items_per_s"], perf["items_per_s"] if busy else None,
                              alpha),
        latency_seconds_p95=perf["batch_latency_seconds_p95"] if busy
        else agg["latency_seconds_p95"],
        mean_batch_size=ewma(agg["mean_batch_size"], perf["mean_batch_size"] if busy else None,
                             alpha),
        item_seconds=perf["item_seconds"] if busy and perf["item_seconds"]
        else agg["item_seconds"],
        window=window, updated_at=timestamp_ms)


def window_items_per_s(agg: ModelAggregate) -> float:
    """Mean items/s over the window, idle samples included."""
    if not agg["window"]:
        return 0.0
    return sum(p[1] for p in agg["window"]) / len(agg["window"])


def _empty(worker: str, model: str) -> ModelAggregate:
    return ModelAggregate(worker=worker, model=model, samples=0, busy_samples=0, items_total=0,
                          ewma_items_per_s=None, latency_seconds_p95=None,
                          mean_batch_size=None, item_seconds=None, window=[], updated_at=0)
