"""What the sysinfo app decides of a worker or a pool: a PolicyEntry, with each model's
range of the pool's task partitions (`ModelRange`, the Avro record ModelPartitions) and each
model's speed and task size (`ModelRate`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict


class PolicyKind(StrEnum):
    WORKER = "WORKER"
    POOL = "POOL"


class WorkerHealth(StrEnum):
    HEALTHY = "HEALTHY"
    STALE = "STALE"
    GONE = "GONE"


@dataclass(frozen=True)
class ModelRange:
    """Partitions `first` .. `first + count - 1` carry the tasks of `model` (and of every
    model a worker of `model` answers alike, `serves`: any `sim:` one)."""

    model: str
    first: int
    count: int

    @property
    def partitions(self) -> range:
        return range(self.first, self.first + self.count)

    def fits(self, partitions: int) -> bool:
        """Whether the range lies inside a topic of `partitions` partitions."""
        return self.count >= 1 and self.first + self.count <= partitions

    def __contains__(self, partition: object) -> bool:
        return isinstance(partition, int) and self.first <= partition < self.first + self.count


class ModelRate(TypedDict):
    """Items/s of one model (a `model_ref`: NAME, or NAME:VERSION) and its task size."""

    model: str
    items_per_s: float
    task_size: int | None


class PolicyEntry(TypedDict):
    worker: str
    pool: str
    model: str | None
    capacity_items_per_s: float
    weight: float
    strategy: str
    updated_at: int
    kind: PolicyKind
    share: float
    health: WorkerHealth
    batch_size: int | None
    task_size: int | None
    models: list[str]
    #: ModelPartitions records on the wire; `read_record` and `plain_record` convert.
    model_partitions: list[ModelRange]
    model_rates: list[ModelRate]
