"""What an inference process (`inferstream worker`, `inferstream stream`) does before it loads
a model: its allocator and its threads, each logged in one line at start.

    threads: torch 2 (derived), decode 1 (derived); 2 cores, device cpu
    allocator: /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 (preloaded at start)

Models are then built by `streams.worker.loader.model_loader`, which logs how each runs.
"""

from __future__ import annotations

import logging
import os

from inferstream.config import WorkerConfig

log = logging.getLogger(__name__)


def prepare_process(settings: WorkerConfig) -> str:
    """Preload the allocator (one re-exec, before torch loads), size torch's threads; log
    both; the device the models run on. Call first, before any model is built."""
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
    return device
