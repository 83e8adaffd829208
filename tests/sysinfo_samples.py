"""SysInfoSample records as a synthetic worker would publish them (unit and integration)."""

from __future__ import annotations

from typing import Any

from inferstream.schemas.records import (
    Calibration,
    ModelPerformance,
    SysInfoSample,
    now_ms,
)


def perf(model: str, items_per_s: float, interval_s: float = 2.0, *,
         p95: float | None = 0.05, batch: float | None = 8.0,
         version: str | None = None) -> ModelPerformance:
    return ModelPerformance(
        model=model, version=version, items=round(items_per_s * interval_s),
        items_per_s=items_per_s, batch_latency_seconds_p50=p95, batch_latency_seconds_p95=p95,
        item_seconds=1.0 / items_per_s if items_per_s else None, mean_batch_size=batch)


def calibrated(model: str, items_per_s: float, version: str | None = None) -> Calibration:
    """The calibration of `model` (at `version`) at `items_per_s`."""
    return Calibration(model=model, version=version, items_per_s=items_per_s, batch_size=8,
                       seconds=8 / items_per_s, measured_at=now_ms())


def sample(worker: str, items_per_s: float = 0.0, *, pool: str = "default",
           model: str = "sim:ms=10", timestamp: int | None = None, interval_s: float = 2.0,
           calibration_items_per_s: float | None = None, **fields: Any) -> SysInfoSample:
    """A sample of `worker` serving `model` at `items_per_s` (0: idle, no per-model figures
    beyond zero items), optionally with a start-up calibration."""
    calibration = None
    if calibration_items_per_s is not None:
        calibration = Calibration(model=model, version=None,
                                  items_per_s=calibration_items_per_s, batch_size=8,
                                  seconds=0.5, measured_at=now_ms())
    record = SysInfoSample(
        worker=worker, pool=pool, host="host-" + worker,
        timestamp=now_ms() if timestamp is None else timestamp, model=model, device="cpu",
        cpu_percent=10.0, memory_bytes=100 << 20, gpu_utilization=None, gpu_memory_bytes=None,
        throughput_items_per_s=items_per_s, latency_seconds_p50=0.05,
        queue_depth=0, assigned_partitions=[0], extra={}, interval_s=interval_s,
        host_cpu_percent=None, host_memory_available_bytes=None, accelerator=None,
        gpu_memory_total_bytes=None, latency_seconds_p95=0.05, consumer_lag=0,
        served_models=[model], models=[perf(model, items_per_s, interval_s)],
        calibration=calibration, software={"inferstream": "test"},
        calibrations=[calibration] if calibration else [])
    record.update(fields)  # type: ignore[typeddict-item]
    return record
