"""Processing strategies: how a pool's HEALTHY workers turn into capacities and batch sizes.

A strategy sees the workers of one pool (`WorkerView`, made by the sysinfo app from their
samples) and plans each one's capacity; the policy normalises capacities into shares.
Built-ins are below; others register under the entry point group `inferstream.strategies` (a
Strategy instance, or a class or factory that makes one without arguments) and are chosen
per pool by name.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

from inferstream.policy.errors import StrategyLoadError, UnknownStrategyError
from inferstream.schemas.records import WorkerHealth

ENTRY_POINT_GROUP = "inferstream.strategies"


@dataclass(frozen=True)
class WorkerView:
    """What a strategy sees of one worker. Rates in items/s, latencies in seconds."""

    worker: str
    pool: str
    health: WorkerHealth
    models: tuple[str, ...]
    #: Smoothed items/s the worker does while busy, all its models together; None until
    #: the worker has processed tasks.
    measured_items_per_s: float | None
    calibration_items_per_s: float | None
    latency_seconds_p95: float | None = None
    mean_batch_size: float | None = None
    calibration_batch_size: int | None = None
    queue_depth: int = 0
    consumer_lag: int | None = None
    gpu_memory_bytes: int | None = None
    gpu_memory_total_bytes: int | None = None
    #: Items/s of each model it serves, by `model_ref` (NAME:VERSION for a repository
    #: model's version): measured while busy, else its calibration; a model with neither
    #: is left out.
    model_rates: Mapping[str, float] = field(default_factory=dict)

    @property
    def base_capacity(self) -> float | None:
        """Measured throughput once the worker has processed tasks, else its calibration."""
        if self.measured_items_per_s is not None:
            return self.measured_items_per_s
        return self.calibration_items_per_s


@dataclass(frozen=True)
class StrategySettings:
    """What strategies may be tuned by (from `SysinfoConfig`)."""

    latency_slo_s: float = 0.5
    max_batch_size: int = 1024
    #: memory-aware: fraction of device memory kept free.
    memory_headroom: float = 0.1


@dataclass(frozen=True)
class WorkerPlan:
    """A strategy's decision for one worker; `batch_size` None leaves the default."""

    capacity_items_per_s: float
    batch_size: int | None = None


@runtime_checkable
class Strategy(Protocol):
    name: str

    def plan(self, workers: Sequence[WorkerView],
             settings: StrategySettings) -> dict[str, WorkerPlan]:
        """A plan per worker id of `workers` (one pool's HEALTHY workers)."""
        ...


class ThroughputStrategy:
    """Capacity is the measured, smoothed items/s (the calibration until tasks ran)."""

    name = "throughput"

    def plan(self, workers: Sequence[WorkerView],
             settings: StrategySettings) -> dict[str, WorkerPlan]:
        return {w.worker: WorkerPlan(w.base_capacity or 0.0) for w in workers}


class LeastLoadedStrategy:
    """Capacity discounted by the backlog a worker already has: a worker with seconds of
    queued and lagging tasks gets fewer new partitions."""

    name = "least-loaded"

    def plan(self, workers: Sequence[WorkerView],
             settings: StrategySettings) -> dict[str, WorkerPlan]:
        plans = {}
        for w in workers:
            rate = w.base_capacity or 0.0
            backlog_s = (w.queue_depth + (w.consumer_lag or 0)) / rate if rate > 0 else 0.0
            plans[w.worker] = WorkerPlan(rate / (1.0 + backlog_s))
        return plans


class _EachWorker:
    """A strategy that plans each worker on its own (`_one`), regardless of the others."""

    def plan(self, workers: Sequence[WorkerView],
             settings: StrategySettings) -> dict[str, WorkerPlan]:
        return {w.worker: self._one(w, settings) for w in workers}

    @staticmethod
    def _one(w: WorkerView, settings: StrategySettings) -> WorkerPlan:
        raise NotImplementedError


class MemoryAwareStrategy(_EachWorker):
    """No more per batch than fits on the device: the batch size is bounded by free device
    memory at the memory one item took so far, and capacity shrinks with it."""

    name = "memory-aware"

    @staticmethod
    def _one(w: WorkerView, settings: StrategySettings) -> WorkerPlan:
        rate = w.base_capacity or 0.0
        batch = w.mean_batch_size or w.calibration_batch_size
        used, total = w.gpu_memory_bytes, w.gpu_memory_total_bytes
        if not batch or not used or not total:
            return WorkerPlan(rate)
        per_item = used / batch  # weights included: an upper bound, so a safe one
        free = total * (1.0 - settings.memory_headroom) - used
        fits = min(settings.max_batch_size, math.floor(batch + free / per_item))
        if fits < 1:
            return WorkerPlan(0.0, 1)
        return WorkerPlan(rate * min(1.0, fits / batch), fits)


class LatencySloStrategy(_EachWorker):
    """The most throughput whose p95 batch latency stays under the target: batches shrink
    in proportion to the overshoot (latency taken as proportional to batch size), capacity
    with them; a worker that misses the target even at batch size 1 gets none."""

    name = "latency-slo"

    @staticmethod
    def _one(w: WorkerView, settings: StrategySettings) -> WorkerPlan:
        rate = w.base_capacity or 0.0
        p95, batch = w.latency_seconds_p95, w.mean_batch_size
        if not p95 or not batch:
            return WorkerPlan(rate)
        ratio = settings.latency_slo_s / p95
        fits = min(settings.max_batch_size, math.floor(batch * ratio))
        if fits < 1:
            return WorkerPlan(0.0, 1)
        return WorkerPlan(rate * min(1.0, ratio), fits)


BUILT_IN: dict[str, Callable[[], Strategy]] = {
    ThroughputStrategy.name: ThroughputStrategy,
    LeastLoadedStrategy.name: LeastLoadedStrategy,
    MemoryAwareStrategy.name: MemoryAwareStrategy,
    LatencySloStrategy.name: LatencySloStrategy,
}


def registered_names() -> list[str]:
    """Every strategy name: built in, then by entry point."""
    names = list(BUILT_IN)
    names += [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in names]
    return names


def load_strategy(name: str, pool: str | None = None) -> Strategy:
    """The strategy called `name`; UnknownStrategyError names the known ones."""
    if name in BUILT_IN:
        return BUILT_IN[name]()
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        where = f" for pool {pool!r}" if pool else ""
        raise UnknownStrategyError(f"unknown strategy {name!r}{where}; known: "
                                   f"{', '.join(registered_names())}")
    try:
        loaded = found[0].load()
        is_instance = isinstance(loaded, Strategy) and not inspect.isclass(loaded)
        strategy = loaded if is_instance else loaded()
    except Exception as exc:  # a plug-in's import or constructor may raise anything
        raise StrategyLoadError(f"strategy {name!r} does not load: {exc}") from exc
    if not isinstance(strategy, Strategy):
        raise StrategyLoadError(f"strategy {name!r} has no name and plan(workers, settings)")
    return strategy
