"""The worker's model loader: a registry model by name, with its forward pass prepared.

Used for the models a worker or stream member starts with and for those it loads on demand.
Each load logs how the model runs (`models.forward`), whether its compiled forward pass came
from the cache, and how long the whole load took:

    forward of efficientnet_lite0: compiled (6.1 ms/item against 8.8 eager when compiled;
    from the cache, 1.3 s to load), fp32, channels-last
    model efficientnet_lite0 loaded in 1.6 s
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from inferstream.config import WorkerConfig
from inferstream.models import LoadedModel, load_model
from inferstream.models.forward import prepare_device_decode, prepare_forward
from inferstream.models.threads import plan_threads
from inferstream.serving.hooks import WorkerHooks

log = logging.getLogger(__name__)

#: Builds a registry model by name (on the worker's device, with its weights settings).
ModelLoader = Callable[[str], LoadedModel]


def model_loader(settings: WorkerConfig, device: str,
                 hooks: WorkerHooks | None = None) -> ModelLoader:
    """Loads models on `device` with the weights settings (`--weights` is the first
    `--model`'s) and prepares their forward pass and decoding with the worker's thread plan.
    Blocks for the compile: call it before joining a group, or on a thread."""
    hooks = hooks or WorkerHooks()
    threads = plan_threads(device, settings.torch_threads, settings.decode_threads)

    def load(name: str) -> LoadedModel:
        started = time.perf_counter()
        weights = settings.weights if settings.models and name == settings.models[0] else None
        model = load_model(name, device=device, weights=weights,
                           random_weights=settings.random_weights)
        report = prepare_forward(
            model, precision=settings.precision, channels_last=settings.channels_last == "on",
            compile_mode=settings.compile, max_batch=settings.max_batch,
            torch_threads=threads.torch_threads, cache_dir=settings.compile_cache_dir)
        log.info("%s", report.describe())
        decoding = prepare_device_decode(model, settings.decode_on_device,
                                         threads.decode_threads, settings.max_batch)
        if decoding:
            log.info("%s", decoding)
        hooks.after_model_prepared(model.name, report.compiled, report.compile_s)
        log.info("model %s loaded in %.1f s", model.name, time.perf_counter() - started)
        return model

    return load
