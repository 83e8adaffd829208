"""A worker as the sysinfo app knows it: its latest sample, its aggregates, its health, and
what a strategy sees of it (`view_of`: its `WorkerView`)."""

from __future__ import annotations

from typing import TypedDict

from inferstream.models.names import version_ref
from inferstream.policy.strategies import WorkerView
from inferstream.schemas.records import Calibration, ModelPerformance, SysInfoSample, WorkerHealth
from inferstream.sysinfo.aggregates import ModelAggregate

#: Model name of the aggregate made from a sample without per-model figures (a v1 writer).
ALL_MODELS = "*"


class WorkerRecord(TypedDict):
    """One row of the workers table: plain JSON, latest per worker wins."""

    sample: SysInfoSample
    received_at: int
    perf: dict[str, ModelAggregate]


def performances(sample: SysInfoSample) -> list[ModelPerformance]:
    """The sample's per-model figures; a sample without them (v1) yields one for all models."""
    if sample["models"]:
        return sample["models"]
    rate = sample["throughput_items_per_s"]
    return [ModelPerformance(
        model=ALL_MODELS, version=None, items=round(rate * sample["interval_s"]),
        items_per_s=rate, batch_latency_seconds_p50=sample["latency_seconds_p50"],
        batch_latency_seconds_p95=sample["latency_seconds_p95"], item_seconds=None,
        mean_batch_size=None)]


def performance_ref(figures: ModelPerformance | Calibration) -> str:
    """The model and version that `figures` are of, as a `model_ref` (NAME:VERSION for a
    repository model's version): the key of its aggregate and of its rate."""
    return version_ref(figures["model"], figures.get("version"))


def calibrations(sample: SysInfoSample) -> list[Calibration]:
    """Every served model's calibration; a sample before v3 has at most the first one's."""
    found = sample.get("calibrations") or []
    first = sample["calibration"]
    return found if found or first is None else [first]


def model_rates(record: WorkerRecord) -> dict[str, float]:
    """Items/s of each model the worker serves, by `performance_ref`: while busy, where it
    has run items, else its calibration."""
    rates = {ref: busy_items_per_s(agg) for ref, agg in record["perf"].items()
             if agg["items_total"] > 0 and ref != ALL_MODELS}
    for calibration in calibrations(record["sample"]):
        rates.setdefault(performance_ref(calibration), calibration["items_per_s"])
    return {ref: rate for ref, rate in rates.items() if rate > 0}


def last_seen_ms(record: WorkerRecord) -> int:
    """When the worker was last heard of: its sample's time, unless that is ahead of ours."""
    return min(record["sample"]["timestamp"], record["received_at"])


def health(last_seen: int, interval_s: float, now_ms: int, stale_intervals: float,
           gone_after_s: float) -> WorkerHealth:
    """HEALTHY while samples arrive; STALE after `stale_intervals` missed; GONE after
    `gone_after_s` of silence."""
    silent_ms = now_ms - last_seen
    if silent_ms > gone_after_s * 1000:
        return WorkerHealth.GONE
    if silent_ms > stale_intervals * interval_s * 1000:
        return WorkerHealth.STALE
    return WorkerHealth.HEALTHY


def view_of(record: WorkerRecord, health_now: WorkerHealth) -> WorkerView:
    sample = record["sample"]
    busy = [a for a in record["perf"].values() if a["items_total"] > 0]
    measured = sum(busy_items_per_s(a) for a in busy) if busy else None
    p95s = [a["latency_seconds_p95"] for a in busy if a["latency_seconds_p95"] is not None]
    batches = [a["mean_batch_size"] for a in busy if a["mean_batch_size"] is not None]
    calibration = sample["calibration"]
    return WorkerView(
        worker=sample["worker"], pool=sample["pool"], health=health_now,
        models=served_models(sample), measured_items_per_s=measured,
        calibration_items_per_s=calibration["items_per_s"] if calibration else None,
        latency_seconds_p95=max(p95s) if p95s else sample["latency_seconds_p95"],
        mean_batch_size=max(batches) if batches else None,
        calibration_batch_size=calibration["batch_size"] if calibration else None,
        queue_depth=sample["queue_depth"], consumer_lag=sample["consumer_lag"],
        gpu_memory_bytes=sample["gpu_memory_bytes"],
        gpu_memory_total_bytes=sample["gpu_memory_total_bytes"], model_rates=model_rates(record))


def busy_items_per_s(agg: ModelAggregate) -> float:
    """How fast the model goes while it has work: 1 / its seconds per item.

    Not the items/s it finished: a worker whose partitions run dry for part of a window
    finishes fewer items without being slower, and a capacity taken from that follows the
    assignment (fewer partitions, lower rate, fewer partitions) instead of the hardware.
    Samples without per-item times (a v1 writer) fall back to the items/s."""
    if agg["item_seconds"]:
        return 1.0 / agg["item_seconds"]
    return agg["ewma_items_per_s"] or 0.0


def served_models(sample: SysInfoSample) -> tuple[str, ...]:
    """Every model the worker serves, sorted; a v1 sample names at most one."""
    names = set(sample["served_models"])
    if not names and sample["model"]:
        names.add(sample["model"])
    return tuple(sorted(names))
