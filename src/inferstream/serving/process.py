"""What an inference process (`inferstream worker`, `inferstream stream`) does before it loads
a model: its allocator and its threads, each logged in one line at start.

    threads: torch 2 (derived), decode 1 (derived); 2 cores, device cpu
    allocator: /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 (preloaded at start)

Models are then built by `serving.loader.model_loader`, which logs how each runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from inferstream.config import Config, WorkerConfig
from inferstream.errors import ConfigError
from inferstream.signals import when_stopping

if TYPE_CHECKING:
    from inferstream.serving.loop import Worker

log = logging.getLogger(__name__)


def prepare_process(settings: WorkerConfig) -> str:
    """Preload the allocator (one re-exec, before torch loads), size torch's threads; log
    both; the device the models run on. Call first, before any model is built."""
    from inferstream.serving.allocator import choose, reexec_with

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


def check_serving(config: Config, role: str) -> None:
    """What a process that serves a model needs before any connection: a model (a repository
    model's card and folders readable), and collectors that load (one line each, failing
    fast)."""
    if not config.worker.models:
        raise ConfigError(f"the {role} needs a model: --model NAME "
                          "(or INFERSTREAM_WORKER_MODELS)")
    if config.worker.model_repository:  # the models' cards and folders, before torch loads
        from inferstream.models.repository import open_repository
        from inferstream.models.repository.check import check_names

        check_names(open_repository(config.worker.model_repository), config.worker.models,
                    allow_python=config.worker.allow_python_models)
    from inferstream.serving.collectors import check_collectors

    check_collectors(config.worker.collectors)


async def serve_until_stopped(worker: Worker) -> None:
    """SIGTERM and SIGINT make the worker drain: finish, commit, leave the group, return
    (before it has joined: give up the start). Not through `loop.add_signal_handler`, which
    would take over the wakeup fd that `signals` watches."""
    loop = asyncio.get_running_loop()
    when_stopping(lambda: loop.call_soon_threadsafe(worker.request_stop))
    await worker.run()
