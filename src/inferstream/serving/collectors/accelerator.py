"""The accelerator collector: the CUDA device the worker's models run on, if any."""

from __future__ import annotations

import logging
import sys
from typing import Any

from inferstream.schemas.records import AcceleratorFields
from inferstream.serving.collectors.base import SampleContext

log = logging.getLogger(__name__)

_ABSENT = AcceleratorFields(accelerator=None, gpu_utilization=None, gpu_memory_bytes=None,
                            gpu_memory_total_bytes=None)


class AcceleratorCollector:
    """Device name, memory in use and total (the whole device) and utilisation (0 to 1,
    where the driver reports it through pynvml) of a `cuda` worker; all null elsewhere.

    It never imports torch: a process that has not loaded it has no CUDA device to report.
    """

    name = "accelerator"

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._utilization_known = True

    def collect(self, context: SampleContext) -> AcceleratorFields:
        torch: Any = sys.modules.get("torch")
        if torch is None or not context.device.startswith("cuda"):
            return AcceleratorFields(**_ABSENT)
        index = _device_index(context.device)
        if index not in self._names:
            self._names[index] = str(torch.cuda.get_device_name(index))
        free, total = torch.cuda.mem_get_info(index)
        return AcceleratorFields(accelerator=self._names[index],
                                 gpu_utilization=self._utilization(torch, index),
                                 gpu_memory_bytes=int(total - free),
                                 gpu_memory_total_bytes=int(total))

    def _utilization(self, torch: Any, index: int) -> float | None:
        if not self._utilization_known:
            return None
        try:
            return float(torch.cuda.utilization(index)) / 100.0
        except Exception as exc:  # no pynvml, or a driver without the counter: ask no more
            log.info("GPU utilisation unavailable (%s); reported as null", exc)
            self._utilization_known = False
            return None


def _device_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0
