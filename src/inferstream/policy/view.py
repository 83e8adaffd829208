"""`PolicyView`: what the policy says of a pool, in the one shape every reader receives.

The controller (task sizes, deadlines, pacing, where a model's tasks go) and the workers'
assignor (who owns which partition) read the policy through this view, never through the
table's records: `PolicyTable` implements it by following the policy topic, `NO_POLICY` is
the view of a process that follows none (even shares, the controller's default task size,
every partition open to every model). `ModelRange`, the one range type, is the one the
PolicyEntry record carries (`schemas.records`), exported here with the view.

Speeds and task sizes are per model where the policy measured the model: a model is a
`model_ref` (NAME, or NAME:VERSION), and `model_figure` finds the figure that stands for it.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from inferstream.schemas.records import ModelRange, serves, split_ref

__all__ = ["NO_POLICY", "ModelRange", "NoPolicy", "PolicyView", "WorkerPolicy", "model_figure",
           "model_range"]

T = TypeVar("T")


@dataclass(frozen=True)
class WorkerPolicy:
    """What the policy says of one worker: its share of the pool (0 to 1), whether it is
    HEALTHY, its capacity in items/s (0 when unknown, all its models together), the models it
    serves and, by `model_ref`, the items/s of each model measured or calibrated on it."""

    share: float
    healthy: bool
    capacity_items_per_s: float = 0.0
    models: tuple[str, ...] = ()
    model_rates: Mapping[str, float] = field(default_factory=dict)

    def rate_for(self, model: str | None) -> float:
        """Items/s of a task of `model` (a `model_ref`) here: the model's own figure where
        the policy has one, else the worker's capacity (0 when unknown)."""
        rate = model_figure(model, self.model_rates) if model is not None else None
        return rate if rate is not None and rate > 0 else self.capacity_items_per_s


def model_range(model: str, ranges: Sequence[ModelRange]) -> ModelRange | None:
    """The range of `ranges` that carries tasks of `model`, or None."""
    return next((r for r in ranges if serves(r.model, model)), None)


def model_figure(model: str, figures: Mapping[str, T]) -> T | None:
    """The figure of `figures` (by `model_ref`) that stands for a task of `model`: its own,
    else that of a model that serves it (of a task naming no version, the newest version's);
    None where no figure serves it."""
    if model in figures:
        return figures[model]
    found = sorted((split_ref(ref)[1] or 0, ref) for ref in figures if serves(ref, model))
    return figures[found[-1][1]] if found else None


class PolicyView(Protocol):
    """The policy of each pool, as of now; every answer may change between two calls."""

    def workers(self, pool: str) -> Mapping[str, WorkerPolicy] | None:
        """Each worker's share, health, capacity and models; None when `pool` has no
        policy (the sysinfo app is not running, or its policy is too old)."""

    def model_ranges(self, pool: str) -> Sequence[ModelRange]:
        """Each model's range of `pool`'s task partitions; none when every task may go to
        any partition."""

    def task_size(self, pool: str, model: str | None = None) -> int | None:
        """Items per task for about `task_seconds` of work on `pool`'s median worker: for
        `model` (a `model_ref`) where the policy measured it, else the pool's own; None
        without a policy."""


class NoPolicy:
    """The view of a process that follows no policy."""

    def workers(self, pool: str) -> Mapping[str, WorkerPolicy] | None:
        return None

    def model_ranges(self, pool: str) -> Sequence[ModelRange]:
        return ()

    def task_size(self, pool: str, model: str | None = None) -> int | None:
        return None


NO_POLICY: PolicyView = NoPolicy()


def median_rate(workers: Collection[WorkerPolicy], model: str) -> float | None:
    """The median items/s of `model` among `workers`: of those the policy measured it on,
    else of every known capacity; None where neither is known."""
    figures = [r for r in (model_figure(model, w.model_rates) for w in workers) if r]
    capacities = [w.capacity_items_per_s for w in workers if w.capacity_items_per_s > 0]
    rates = figures or capacities
    return statistics.median(rates) if rates else None
