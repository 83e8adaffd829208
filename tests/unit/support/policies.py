"""`FixedPolicy`: a `PolicyView` with set answers, for tests of what reads the policy; and
policy entries as sysinfo writes them on the policy topic, for tests of what follows it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from inferstream.policy.view import ModelRange, WorkerPolicy
from inferstream.schemas.records import (
    PolicyEntry,
    PolicyKind,
    WorkerHealth,
    now_ms,
    plain_record,
)
from inferstream.testing import MemoryBroker
from tests.unit.support.memory import CODEC, make_config

T = TypeVar("T")
#: An answer, or a function of the pool that gives it (and may raise, as a table can).
Answer = T | Callable[[str], T]


class FixedPolicy:
    """Answers `workers`, `model_ranges` and `task_size` with what it was given (values, or
    functions of the pool); by default it says what `NO_POLICY` says."""

    def __init__(self, workers: Answer[Mapping[str, WorkerPolicy] | None] = None,
                 ranges: Answer[Sequence[ModelRange]] = (),
                 task_size: Answer[int | None] = None) -> None:
        self._workers, self._ranges, self._task_size = workers, ranges, task_size

    def workers(self, pool: str) -> Mapping[str, WorkerPolicy] | None:
        return _answer(self._workers, pool)

    def model_ranges(self, pool: str) -> Sequence[ModelRange]:
        return _answer(self._ranges, pool)

    def task_size(self, pool: str, model: str | None = None) -> int | None:
        return _answer(self._task_size, pool)


def _answer(answer: Answer[T], pool: str) -> T:
    return answer(pool) if callable(answer) else answer


def entry(worker: str, share: float, health: WorkerHealth = WorkerHealth.HEALTHY,
          updated_at: int | None = None, pool: str = "default") -> PolicyEntry:
    """The policy entry of `worker` (empty: the pool's own entry) with `share`."""
    kind = PolicyKind.WORKER if worker else PolicyKind.POOL
    return PolicyEntry(worker=worker, pool=pool, model=None, capacity_items_per_s=share * 100,
                       weight=share, strategy="throughput",
                       updated_at=now_ms() if updated_at is None else updated_at, kind=kind,
                       share=share, health=health, batch_size=None, task_size=None, models=[],
                       model_partitions=[], model_rates=[])


def write(broker: MemoryBroker, *entries: PolicyEntry) -> None:
    """`entries` on the policy topic of `make_config()`, keyed as sysinfo keys them."""
    for e in entries:
        key = e["pool"] if e["kind"] == PolicyKind.POOL else f"{e['pool']}/{e['worker']}"
        value = CODEC.encode("PolicyEntry", plain_record(PolicyEntry, e))
        broker.produce(make_config().topic("policy"), 0, key.encode(), value)
