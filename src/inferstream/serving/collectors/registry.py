"""Collectors by name: the built-ins, and custom ones registered by entry point.

A package registers a collector in its `pyproject.toml`:

    [project.entry-points."inferstream.collectors"]
    gpu_temperature = "mypackage.collectors:GpuTemperature"

The entry point names a class or factory that takes no arguments (or a ready instance);
the worker builds one per process when the name is in `worker.collectors`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from inferstream.errors import ConfigError
from inferstream.serving.collectors.accelerator import AcceleratorCollector
from inferstream.serving.collectors.base import Collector
from inferstream.serving.collectors.host import CpuCollector, MemoryCollector
from inferstream.serving.collectors.performance import ModelPerformanceCollector
from inferstream.serving.collectors.queue import QueueCollector
from inferstream.serving.collectors.software import SoftwareCollector

ENTRY_POINT_GROUP = "inferstream.collectors"

BUILTIN_COLLECTORS: dict[str, Callable[[], Collector]] = {
    "cpu": CpuCollector,
    "memory": MemoryCollector,
    "accelerator": AcceleratorCollector,
    "models": ModelPerformanceCollector,
    "queue": QueueCollector,
    "software": SoftwareCollector,
}


def check_collectors(names: Iterable[str]) -> dict[str, EntryPoint]:
    """The entry points of the custom collectors among `names`, loading none of them;
    ConfigError (one line) for a name that is neither built in nor registered."""
    registered = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for name in names:
        if name not in BUILTIN_COLLECTORS and name not in registered:
            known = ", ".join([*BUILTIN_COLLECTORS, *sorted(registered)])
            raise ConfigError(f"unknown collector {name!r}: known are {known} "
                              f"(custom ones register by entry point {ENTRY_POINT_GROUP})")
    return registered


def load_collectors(names: Iterable[str]) -> dict[str, Collector]:
    """One collector per name, in order; ConfigError (one line) for a name nobody provides
    or an entry point that does not load."""
    names = list(dict.fromkeys(names))
    registered = check_collectors(names)
    return {name: BUILTIN_COLLECTORS[name]() if name in BUILTIN_COLLECTORS
            else _from_entry_point(registered[name]) for name in names}


def _from_entry_point(point: EntryPoint) -> Collector:
    try:
        loaded: Any = point.load()
        # A class or a factory is called; a ready instance is taken as it is.
        ready = isinstance(loaded, Collector) and not inspect.isclass(loaded)
        collector = loaded if ready else loaded()
    except Exception as exc:  # a broken plugin is a start-up error, not a crash
        raise ConfigError(f"collector {point.name!r} ({point.value}) does not load: "
                          f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(collector, Collector):
        raise ConfigError(f"collector {point.name!r} ({point.value}) has no name and "
                          "collect(context)")
    return collector
