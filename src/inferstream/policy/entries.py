"""The policy table: PolicyEntry records per pool and worker, and when to rewrite them.

`pool_entries` is pure: one pool's workers and its strategy in, its entries out (a WORKER
entry per worker, then the POOL entry, with each model's range of task partitions when the
pool serves several, see `model_ranges`, and each model's items/s and task size, see
`model_rates`). `Hysteresis` decides which of them are worth writing to the compacted policy
topic, where the latest entry per key wins.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from inferstream.policy.assignment import target_counts
from inferstream.policy.strategies import Strategy, StrategySettings, WorkerPlan, WorkerView
from inferstream.policy.view import model_figure
from inferstream.schemas.records import (
    ModelRange,
    ModelRate,
    PolicyEntry,
    PolicyKind,
    WorkerHealth,
    serves,
)


def policy_key(entry: PolicyEntry) -> str:
    """`<pool>/<worker>` for a WORKER entry, `<pool>` for the POOL entry."""
    if entry["kind"] == PolicyKind.POOL:
        return entry["pool"]
    return f"{entry['pool']}/{entry['worker']}"


def task_size(capacity_items_per_s: float, task_seconds: float) -> int | None:
    """Items for about `task_seconds` of work at `capacity_items_per_s`; None without one."""
    if capacity_items_per_s <= 0:
        return None
    return max(1, round(capacity_items_per_s * task_seconds))


def pool_entries(pool: str, workers: Sequence[WorkerView], strategy: Strategy,
                 settings: StrategySettings, task_seconds: float, now_ms: int, *,
                 partitions: int = 0, previous: Sequence[ModelRange] = ()
                 ) -> list[PolicyEntry]:
    """The entries of `pool`: one per worker (any health), then the POOL entry.

    HEALTHY workers share the pool in proportion to their planned capacities (equally when
    none has a capacity yet), so their shares sum to 1; other workers get share 0. The POOL
    entry splits the `partitions` of the pool's task topic among its models (`model_ranges`,
    kept from `previous`, the last written ranges, while they still fit) and gives each
    model the speed and task size of its median worker (`model_rates`).
    """
    healthy = [w for w in workers if w.health == WorkerHealth.HEALTHY]
    plans = strategy.plan(healthy, settings) if healthy else {}
    capacities = {w.worker: max(0.0, plans.get(w.worker, WorkerPlan(0.0)).capacity_items_per_s)
                  for w in healthy}
    total = sum(capacities.values())
    entries = []
    for w in sorted(workers, key=lambda v: v.worker):
        if w.worker in capacities:
            share = capacities[w.worker] / total if total > 0 else 1.0 / len(healthy)
            capacity = capacities[w.worker]
            batch = plans.get(w.worker, WorkerPlan(0.0)).batch_size
        else:
            share, capacity, batch = 0.0, w.base_capacity or 0.0, None
        entries.append(_worker_entry(w, strategy.name, capacity, share, batch, task_seconds,
                                     now_ms))
    pool_entry = _pool_entry(pool, strategy.name, entries, total, now_ms)
    pool_entry["model_partitions"] = model_ranges(entries, partitions, previous)
    pool_entry["model_rates"] = model_rates(entries, task_seconds)
    return [*entries, pool_entry]


def _worker_entry(w: WorkerView, strategy: str, capacity: float, share: float,
                  batch: int | None, task_seconds: float, now_ms: int) -> PolicyEntry:
    return PolicyEntry(
        worker=w.worker, pool=w.pool, model=w.models[0] if len(w.models) == 1 else None,
        capacity_items_per_s=capacity, weight=share, strategy=strategy, updated_at=now_ms,
        kind=PolicyKind.WORKER, share=share, health=w.health,
        batch_size=batch,
        task_size=task_size(capacity, task_seconds), models=list(w.models),
        model_partitions=[], model_rates=worker_rates(w, capacity, task_seconds))


def worker_rates(w: WorkerView, capacity: float, task_seconds: float) -> list[ModelRate]:
    """Each model's items/s on `w` and its task size, scaled as the strategy scaled the
    worker (its planned `capacity` against its measured or calibrated one)."""
    base = w.base_capacity
    scale = capacity / base if base else 1.0
    rates = [(model, rate * scale) for model, rate in sorted(w.model_rates.items())]
    return [ModelRate(model=model, items_per_s=rate, task_size=task_size(rate, task_seconds))
            for model, rate in rates if rate > 0]


def model_rates(workers: Sequence[PolicyEntry], task_seconds: float) -> list[ModelRate]:
    """Per model of the HEALTHY `workers`' rates, the median of their items/s for it and
    the task size at that speed. Models one worker answers alike (`serves`: every `sim:`
    model) are one, named by the first of them, at the rates of all their workers."""
    rates = [{r["model"]: r["items_per_s"] for r in w["model_rates"]} for w in workers
             if w["health"] == WorkerHealth.HEALTHY]
    found = []
    for model in _model_groups(sorted({m for worker in rates for m in worker})):
        speeds = [s for s in (model_figure(model, worker) for worker in rates) if s]
        median = statistics.median(speeds)
        found.append(ModelRate(model=model, items_per_s=median,
                               task_size=task_size(median, task_seconds)))
    return found


def _pool_entry(pool: str, strategy: str, workers: list[PolicyEntry], total: float,
                now_ms: int) -> PolicyEntry:
    live = [e for e in workers if e["health"] == WorkerHealth.HEALTHY]
    sizes = [e["task_size"] for e in live if e["task_size"] is not None]
    models = sorted({m for e in live for m in e["models"]})
    return PolicyEntry(
        worker="", pool=pool, model=None, capacity_items_per_s=total, weight=1.0,
        strategy=strategy, updated_at=now_ms, kind=PolicyKind.POOL, share=1.0,
        health=WorkerHealth.HEALTHY if live else WorkerHealth.GONE, batch_size=None,
        task_size=round(statistics.median(sizes)) if sizes else None, models=models,
        model_partitions=[], model_rates=[])


def model_ranges(workers: Sequence[PolicyEntry], partitions: int,
                 previous: Sequence[ModelRange] = ()) -> list[ModelRange]:
    """Consecutive ranges of the `partitions` task partitions, one per model the HEALTHY
    `workers` serve, sized by each model's capacity (largest remainder, at least one each).

    Models one worker answers alike (`serves`: every `sim:` model) share one range, named by
    the first of them. A worker's capacity counts for each model it serves in equal parts
    (equal weights where no capacity is known). No ranges for one model, or for fewer
    partitions than models. `previous` is kept while it covers the same models and
    partitions and every count is within one partition of its exact quota, so a measurement
    that wobbles moves no partition.
    """
    weights = _model_weights([w for w in workers if w["health"] == WorkerHealth.HEALTHY])
    if len(weights) < 2 or partitions < len(weights):
        return []
    total = sum(weights.values())
    quotas = {m: w / total * partitions for m, w in weights.items()}
    if _still_fits(previous, quotas, partitions):
        return list(previous)
    counts = target_counts({m: w / total for m, w in weights.items()}, partitions,
                           sorted(weights))
    ranges, first = [], 0
    for model in sorted(m for m in weights if counts[m] > 0):
        ranges.append(ModelRange(model, first, counts[model]))
        first += counts[model]
    return ranges


def _model_weights(workers: Sequence[PolicyEntry]) -> dict[str, float]:
    """Capacity by model group (named by its first model), each worker's split evenly."""
    groups = _model_groups(sorted({m for w in workers for m in w["models"]}))
    known = any(w["capacity_items_per_s"] > 0 for w in workers)
    weights = dict.fromkeys(groups, 0.0)
    for w in workers:
        served = [g for g in groups if any(serves(g, m) for m in w["models"])]
        for group in served:
            weights[group] += (w["capacity_items_per_s"] if known else 1.0) / len(served)
    return weights


def _model_groups(models: Sequence[str]) -> list[str]:
    """The first of each set of `models` that serve each other (sorted names in)."""
    groups: list[str] = []
    for model in models:
        if not any(serves(g, model) for g in groups):
            groups.append(model)
    return groups


def _still_fits(previous: Sequence[ModelRange], quotas: dict[str, float],
                partitions: int) -> bool:
    counts = {r.model: r.count for r in previous}
    return (set(counts) == set(quotas) and sum(counts.values()) == partitions
            and all(c >= 1 and abs(c - quotas[m]) < 1 for m, c in counts.items()))


@dataclass(frozen=True)
class _Written:
    entry: PolicyEntry
    at_ms: int


class Hysteresis:
    """Which entries to write: a pool is rewritten when one of its entries moves materially
    (a share by more than `hysteresis`, a health, a model list or range, the models with a
    rate, the pool's capacity or one of its model rates by more than `hysteresis` relative),
    and then every entry of it that changed at all, so the written shares keep summing to 1.
    Otherwise entries are refreshed every `refresh_s`, except those already written as
    GONE."""

    def __init__(self, hysteresis: float, refresh_s: float) -> None:
        self.hysteresis = hysteresis
        self.refresh_ms = refresh_s * 1000
        self._written: dict[str, _Written] = {}

    def select(self, entries: Iterable[PolicyEntry], now_ms: int) -> list[PolicyEntry]:
        """The entries of one pool to write now; they count as written."""
        entries = list(entries)
        previous = [self._written.get(policy_key(e)) for e in entries]
        if any(self._material(e, p) for e, p in zip(entries, previous, strict=True)):
            chosen = [e for e, p in zip(entries, previous, strict=True)
                      if p is None or _content(e) != _content(p.entry)]
        else:
            chosen = [e for e, p in zip(entries, previous, strict=True)
                      if p is not None and self._due(p, now_ms)]
        for entry in chosen:
            self._written[policy_key(entry)] = _Written(entry, now_ms)
        return chosen

    def drop(self, key: str) -> None:
        """Forget what was written under `key` (a worker that left the tables)."""
        self._written.pop(key, None)

    def forget(self) -> None:
        """Start over: the next `select` writes everything (a new owner of the policy)."""
        self._written.clear()

    def _material(self, entry: PolicyEntry, previous: _Written | None) -> bool:
        if previous is None:
            return True
        old = previous.entry
        if (entry["health"], entry["models"], entry["model_partitions"]) != (
                old["health"], old["models"], old["model_partitions"]):
            return True
        rates, old_rates = _rates(entry), _rates(old)
        if set(rates) != set(old_rates):
            return True
        if entry["kind"] == PolicyKind.POOL:
            pairs = [(entry["capacity_items_per_s"], old["capacity_items_per_s"]),
                     *((rates[m], old_rates[m]) for m in rates)]
            return any(abs(new - was) / max(was, 1e-9) > self.hysteresis for new, was in pairs)
        return abs(entry["share"] - old["share"]) > self.hysteresis

    def _due(self, previous: _Written, now_ms: int) -> bool:
        if previous.entry["health"] == WorkerHealth.GONE:
            return False
        return now_ms - previous.at_ms >= self.refresh_ms


def _rates(entry: PolicyEntry) -> dict[str, float]:
    return {r["model"]: r["items_per_s"] for r in entry["model_rates"]}


def _content(entry: PolicyEntry) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "updated_at"}
