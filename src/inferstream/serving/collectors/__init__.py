"""Collectors of system information in a worker: built-ins, and custom ones by entry point.

See `base.Collector` for the protocol and `registry` for registering one.
"""

from inferstream.serving.collectors.base import (
    Collector,
    Performance,
    QueueState,
    SampleContext,
    SampleFields,
    ServedModel,
)
from inferstream.serving.collectors.performance import PerformanceWindows
from inferstream.serving.collectors.queue import QueueProbe
from inferstream.serving.collectors.registry import (
    BUILTIN_COLLECTORS,
    ENTRY_POINT_GROUP,
    check_collectors,
    load_collectors,
)

__all__ = [
    "BUILTIN_COLLECTORS",
    "ENTRY_POINT_GROUP",
    "Collector",
    "Performance",
    "PerformanceWindows",
    "QueueProbe",
    "QueueState",
    "SampleContext",
    "SampleFields",
    "ServedModel",
    "check_collectors",
    "load_collectors",
]
