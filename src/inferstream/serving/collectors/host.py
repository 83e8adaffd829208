"""Collectors of the machine's CPU and memory, through psutil."""

from __future__ import annotations

import psutil

from inferstream.schemas.records import CpuFields, MemoryFields
from inferstream.serving.collectors.base import SampleContext


class CpuCollector:
    """`cpu_percent` of the worker process (percent of one core, since the last sample) and
    `host_cpu_percent` of the whole host (percent of all its cores)."""

    name = "cpu"

    def __init__(self) -> None:
        self._process = psutil.Process()
        # psutil measures from the previous call; the first one only sets the start.
        self._process.cpu_percent(interval=None)
        psutil.cpu_percent(interval=None)

    def collect(self, context: SampleContext) -> CpuFields:
        return CpuFields(cpu_percent=float(self._process.cpu_percent(interval=None)),
                         host_cpu_percent=float(psutil.cpu_percent(interval=None)))


class MemoryCollector:
    """`memory_bytes`, the worker's resident memory, and the host's available memory."""

    name = "memory"

    def __init__(self) -> None:
        self._process = psutil.Process()

    def collect(self, context: SampleContext) -> MemoryFields:
        return MemoryFields(memory_bytes=int(self._process.memory_info().rss),
                            host_memory_available_bytes=int(psutil.virtual_memory().available))
