"""Compilers for the tests of the forward pass that build in milliseconds, not in a minute.

`PickledCompiler`'s package is the module itself, pickled: a forward pass read back from the
cache is what the earlier load wrote, as AOTInductor's would be, and it counts its builds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from inferstream.models import TorchModel
from inferstream.models import forward as forward_module

Forward = Callable[[torch.Tensor], torch.Tensor]

#: What a forward pass without a figure of its own times at, in ms per item (`fixed_timings`)
EAGER_MS = 1.0


class Timed:
    """A forward pass that `fixed_timings` times at `ms_per_item`, whatever the machine's load
    (a wall-clock race between a tiny model's eager pass and a stand-in compiled one was lost
    to a busy neighbour's stall, now and then)."""

    def __init__(self, forward: Forward, ms_per_item: float) -> None:
        self.forward = forward
        self.ms_per_item = ms_per_item

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.forward(inputs)


def fixed_timings(monkeypatch: pytest.MonkeyPatch) -> None:
    """`prepare_forward`'s timing of eager against compiled answers each forward pass's
    `Timed` figure (EAGER_MS for the module itself) instead of the wall clock."""

    def ms_per_item(model: TorchModel, forward: Forward, batch: torch.Tensor) -> float:
        return float(getattr(forward, "ms_per_item", EAGER_MS))

    monkeypatch.setattr(forward_module, "_ms_per_item", ms_per_item)


class PickledCompiler:
    """Writes the module to the package path with `torch.save`; loads it back. A build takes
    `build_s`, or, given `gate`, lasts until the test sets it (30 s at most)."""

    def __init__(self, build_s: float = 0.0, gate: threading.Event | None = None):
        self.builds = 0
        self.build_s = build_s
        self.gate = gate
        self._lock = threading.Lock()

    def build(self, module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
        with self._lock:
            self.builds += 1
        if self.gate is not None:
            self.gate.wait(30)
        time.sleep(self.build_s)  # a build that takes a while, for loads at once
        torch.save(module, path)

    def load(self, path: Path, device: torch.device) -> Forward:
        module: torch.nn.Module = torch.load(path, map_location=device, weights_only=False)
        return module


class FailingCompiler(PickledCompiler):
    """A machine without a C++ compiler."""

    def build(self, module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
        raise RuntimeError("Compiler: g++ not found\nmore lines")


class SlowerCompiler(PickledCompiler):
    """A compiled forward pass that times 20x slower than eager (`fixed_timings`)."""

    def load(self, path: Path, device: torch.device) -> Forward:
        return Timed(super().load(path, device), 20 * EAGER_MS)


class InstantCompiler(PickledCompiler):
    """A compiled forward pass that returns at once, every class equally likely, and times
    100x faster than eager (`fixed_timings`)."""

    def load(self, path: Path, device: torch.device) -> Forward:
        super().load(path, device)
        return Timed(lambda inputs: torch.zeros(len(inputs), 1000), EAGER_MS / 100)


class BusyFirstCompiler(PickledCompiler):
    """Slower at the first load (a busy neighbour while it was built), at once afterwards."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    def load(self, path: Path, device: torch.device) -> Forward:
        self.loads += 1
        kind = SlowerCompiler() if self.loads == 1 else InstantCompiler()
        return kind.load(path, device)
