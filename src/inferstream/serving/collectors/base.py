"""What a collector is: a named, cheap reading of one part of a worker and its machine.

The worker's sysinfo publisher takes a `SampleContext` on its event loop (what the worker
knows: its models, their performance over the window, its queue), then runs the enabled
collectors one after the other on its own thread. Each returns one group of a sample's fields
(`SampleFields`, complete); their union, over the publisher's own fields, is one
`SysInfoSample`. A custom collector puts its readings, by name, in `extra` (doubles only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from inferstream.schemas.records import (
    AcceleratorFields,
    CpuFields,
    ExtraFields,
    MemoryFields,
    ModelPerformance,
    PerformanceFields,
    QueueFields,
    SoftwareFields,
)

#: What one collector returns: one group of a sample's fields, of those a `SysInfoSample` is
#: made of besides its publisher's own (`schemas.records.readings`). A custom collector returns
#: `ExtraFields(extra={...})`.
SampleFields = (CpuFields | MemoryFields | AcceleratorFields | PerformanceFields | QueueFields
                | SoftwareFields | ExtraFields)


@dataclass(frozen=True)
class ServedModel:
    """A model the worker has loaded: registry name and weights version (None: unknown)."""

    name: str
    version: str | None


@dataclass(frozen=True)
class Performance:
    """Every served model's performance over the window, and the worker's totals."""

    models: tuple[ModelPerformance, ...] = ()
    items_per_s: float = 0.0
    batch_latency_seconds_p50: float | None = None
    batch_latency_seconds_p95: float | None = None


@dataclass(frozen=True)
class QueueState:
    """The worker's queue: items fetched but unfinished, owned task partitions, their lag
    (log end minus committed offset, summed; None while any is unknown)."""

    items_in_flight: int = 0
    partitions: tuple[int, ...] = ()
    consumer_lag: int | None = None


@dataclass(frozen=True)
class SampleContext:
    """A snapshot of the worker, taken on its event loop; read-only for collectors."""

    worker: str
    pool: str
    device: str
    interval_s: float
    served: tuple[ServedModel, ...] = ()
    performance: Performance = Performance()
    queue: QueueState = QueueState()


@runtime_checkable
class Collector(Protocol):
    """Reads one part of the worker or its machine; `name` enables it in `collectors`.

    `collect` runs on the publisher's thread every `sysinfo_interval_s` and must be cheap
    (well under a millisecond): the whole sample may cost at most 1 % of a worker's CPU. An
    exception is logged and counted; the sample goes out without that collector's fields.
    """

    name: str

    def collect(self, context: SampleContext) -> SampleFields: ...
