"""What a worker reports of itself: a SysInfoSample, made of one group of fields per kind of
reading (what one collector returns) over the fields its publisher fills in itself."""

from __future__ import annotations

from typing import TypedDict


class ModelPerformance(TypedDict):
    model: str
    version: str | None
    items: int
    items_per_s: float
    batch_latency_seconds_p50: float | None
    batch_latency_seconds_p95: float | None
    item_seconds: float | None
    mean_batch_size: float | None


class Calibration(TypedDict):
    model: str
    version: str | None
    items_per_s: float
    batch_size: int
    seconds: float
    measured_at: int


class PublisherFields(TypedDict):
    """Who sent the sample, when, what it serves and how fast each model went at start (or
    when it was loaded): `calibrations`, the first of them also in `calibration`."""

    worker: str
    pool: str
    host: str
    timestamp: int
    model: str | None
    device: str
    interval_s: float
    served_models: list[str]
    calibration: Calibration | None
    calibrations: list[Calibration]


class CpuFields(TypedDict):
    cpu_percent: float
    host_cpu_percent: float | None


class MemoryFields(TypedDict):
    memory_bytes: int
    host_memory_available_bytes: int | None


class AcceleratorFields(TypedDict):
    accelerator: str | None
    gpu_utilization: float | None
    gpu_memory_bytes: int | None
    gpu_memory_total_bytes: int | None


class PerformanceFields(TypedDict):
    models: list[ModelPerformance]
    throughput_items_per_s: float
    latency_seconds_p50: float | None
    latency_seconds_p95: float | None


class QueueFields(TypedDict):
    queue_depth: int
    assigned_partitions: list[int]
    consumer_lag: int | None


class SoftwareFields(TypedDict):
    software: dict[str, str]


class ExtraFields(TypedDict):
    """A custom collector's readings, by name."""

    extra: dict[str, float]


class SysInfoSample(PublisherFields, CpuFields, MemoryFields, AcceleratorFields,
                    PerformanceFields, QueueFields, SoftwareFields, ExtraFields):
    """One sample of a worker (schemas/SysInfoSample.avsc): every group of fields above."""
