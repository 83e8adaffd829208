"""The worker's model loader: a registry model by name, with its forward pass prepared.

Used for the models a worker or stream member starts with and for those it loads on demand.
Each load logs how the model runs (`models.forward`):

    forward of efficientnet_lite0: compiled (6.1 ms/item against 8.8 eager; 34.5 s to
    compile), fp32, channels-last
"""

from __future__ import annotations

import logging
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
        return model

    return load
