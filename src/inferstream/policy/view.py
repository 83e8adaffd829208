"""`PolicyView`: what the policy says of a pool, in the one shape every reader receives.

The controller (task sizes, deadlines, pacing, where a model's tasks go) and the workers'
assignor (who owns which partition) read the policy through this view, never through the
table's records: `PolicyTable` implements it by following the policy topic, `NO_POLICY` is
the view of a process that follows none (even shares, the controller's default task size,
every partition open to every model). `ModelRange`, the one range type, is the one the
PolicyEntry record carries (`schemas.records`), exported here with the view.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from inferstream.schemas.records import ModelRange, serves

__all__ = ["NO_POLICY", "ModelRange", "NoPolicy", "PolicyView", "WorkerPolicy", "model_range"]


@dataclass(frozen=True)
class WorkerPolicy:
    """What the policy says of one worker: its share of the pool (0 to 1), whether it is
    HEALTHY, its capacity in items/s (0 when unknown) and the models it serves."""

    share: float
    healthy: bool
    capacity_items_per_s: float = 0.0
    models: tuple[str, ...] = ()


def model_range(model: str, ranges: Sequence[ModelRange]) -> ModelRange | None:
    """The range of `ranges` that carries tasks of `model`, or None."""
    return next((r for r in ranges if serves(r.model, model)), None)


class PolicyView(Protocol):
    """The policy of each pool, as of now; every answer may change between two calls."""

    def workers(self, pool: str) -> Mapping[str, WorkerPolicy] | None:
        """Each worker's share, health, capacity and models; None when `pool` has no
        policy (the sysinfo app is not running, or its policy is too old)."""

    def model_ranges(self, pool: str) -> Sequence[ModelRange]:
        """Each model's range of `pool`'s task partitions; none when every task may go to
        any partition."""

    def task_size(self, pool: str) -> int | None:
        """Items per task for about 1 s of work on `pool`'s median worker; None without a
        policy."""


class NoPolicy:
    """The view of a process that follows no policy."""

    def workers(self, pool: str) -> Mapping[str, WorkerPolicy] | None:
        return None

    def model_ranges(self, pool: str) -> Sequence[ModelRange]:
        return ()

    def task_size(self, pool: str) -> int | None:
        return None


NO_POLICY: PolicyView = NoPolicy()
