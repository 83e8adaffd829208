"""Compilers for the tests of the forward pass that build in milliseconds, not in a minute.

`PickledCompiler`'s package is the module itself, pickled: a forward pass read back from the
cache is what the earlier load wrote, as AOTInductor's would be, and it counts its builds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

Forward = Callable[[torch.Tensor], torch.Tensor]


class PickledCompiler:
    """Writes the module to the package path with `torch.save`; loads it back."""

    def __init__(self, build_s: float = 0.0):
        self.builds = 0
        self.build_s = build_s
        self._lock = threading.Lock()

    def build(self, module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
        with self._lock:
            self.builds += 1
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
    """A compiled forward pass that takes 0.15 s more per batch: slower than eager by far
    more than a busy machine's stalls of the eager timing (seen: 15 ms per item)."""

    def load(self, path: Path, device: torch.device) -> Forward:
        module = super().load(path, device)

        def forward(inputs: torch.Tensor) -> torch.Tensor:
            time.sleep(0.15)
            return module(inputs)

        return forward


class InstantCompiler(PickledCompiler):
    """A compiled forward pass that returns at once, every class equally likely."""

    def load(self, path: Path, device: torch.device) -> Forward:
        super().load(path, device)
        return lambda inputs: torch.zeros(len(inputs), 1000)


class BusyFirstCompiler(PickledCompiler):
    """Slower at the first load (a busy neighbour while it was built), at once afterwards."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    def load(self, path: Path, device: torch.device) -> Forward:
        self.loads += 1
        kind = SlowerCompiler() if self.loads == 1 else InstantCompiler()
        return kind.load(path, device)
