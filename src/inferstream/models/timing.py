"""Timing work on a model's device, for the choices made when a model is loaded
(`models.forward`: compiled or eager; `models.device_decode`: where JPEGs are decoded)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def best_seconds(action: Callable[[], object], repeats: int = 2) -> float:
    """The fastest of `repeats` timed calls of `action` after one untimed call (the first of
    anything on a device pays for its set-up), each under inference_mode and waited for on
    CUDA."""
    best = float("inf")
    for attempt in range(repeats + 1):
        started = time.perf_counter()
        with torch.inference_mode():
            action()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if attempt:
            best = min(best, time.perf_counter() - started)
    return best
