"""Reading one record of the sysinfo topic: a sample, a dead letter's reason, or a drop."""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferstream.schemas import Codec, SchemaError
from inferstream.schemas.records import SysInfoSample, read_record


@dataclass(frozen=True)
class Intake:
    """What became of a record: `sample` when usable; else `dead_letter` (undecodable) or
    `dropped` (readable but absurd), each with the reason."""

    sample: SysInfoSample | None = None
    dead_letter: str | None = None
    dropped: str | None = None


def read_sample(codec: Codec, value: bytes | None, now_ms: int, max_future_s: float) -> Intake:
    """Decode and check one sysinfo record."""
    if value is None:
        return Intake(dead_letter="tombstone: a sysinfo record without a value")
    try:
        sample = read_record(codec, value, SysInfoSample)
    except SchemaError as exc:
        return Intake(dead_letter=f"undecodable: {exc}")
    reason = absurdity(sample, now_ms, max_future_s)
    if reason is not None:
        return Intake(dropped=reason)
    return Intake(sample=sample)


def absurdity(sample: SysInfoSample, now_ms: int, max_future_s: float) -> str | None:
    """Why `sample` cannot be true (the reason, a metric label), or None when it may be."""
    if not sample["worker"] or not sample["pool"]:
        return "no_worker_id"
    if sample["timestamp"] > now_ms + max_future_s * 1000:
        return "future_timestamp"
    if sample["timestamp"] <= 0:
        return "bad_timestamp"
    if not math.isfinite(sample["interval_s"]) or sample["interval_s"] <= 0:
        return "bad_interval"
    rates = [sample["throughput_items_per_s"]]
    rates += [m["items_per_s"] for m in sample["models"]]
    rates += [c["items_per_s"] for c in [*sample["calibrations"], sample["calibration"]] if c]
    if any(not math.isfinite(r) or r < 0 for r in rates):
        return "negative_throughput"
    if sample["queue_depth"] < 0 or any(m["items"] < 0 for m in sample["models"]):
        return "negative_count"
    return _bad_latency(sample)


def _bad_latency(sample: SysInfoSample) -> str | None:
    latencies = [sample["latency_seconds_p50"], sample["latency_seconds_p95"]]
    for perf in sample["models"]:
        latencies += [perf["batch_latency_seconds_p50"], perf["batch_latency_seconds_p95"]]
    if any(v is not None and (not math.isfinite(v) or v < 0) for v in latencies):
        return "negative_latency"
    return None
