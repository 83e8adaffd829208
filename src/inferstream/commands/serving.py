"""What an inference process (`inferstream worker`, `inferstream stream`) does before it loads
a model: its allocator and its threads, each logged in one line at start.

    threads: torch 2 (derived), decode 1 (derived); 2 cores, device cpu
    allocator: /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 (preloaded at start)

Models are then built by `streams.worker.loader.model_loader`, which logs how each runs.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferstream.config import WorkerConfig

if TYPE_CHECKING:
    from inferstream.models.threads import ThreadPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Serving:
    """The device and threads an inference process runs with."""

    device: str
    threads: ThreadPlan


def prepare_process(settings: WorkerConfig) -> Serving:
    """Preload the allocator (one re-exec, before torch loads), size torch's threads; log
    both. Call first, before any model is built."""
    from inferstream.commands.allocator import choose, reexec_with

    allocator = choose(settings.allocator, os.environ)
    reexec_with(allocator)  # returns when nothing is to change
    import torch

    from inferstream.models.registry import resolve_device
    from inferstream.models.threads import plan_threads

    device = resolve_device(settings.device)
    threads = plan_threads(device, settings.torch_threads, settings.decode_threads)
    torch.set_num_threads(threads.torch_threads)  # model loading; each pipeline sets its own
    log.info("%s", threads.describe())
    log.info("allocator: %s (%s)", allocator.library or "glibc", allocator.why)
    return Serving(device, threads)
