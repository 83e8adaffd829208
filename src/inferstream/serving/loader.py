"""The worker's model loader: a registry model by name, or a version of a model of its model
repository (`NAME:VERSION`, or `NAME` for the newest; `models.repository`, checked on a
synthetic batch), with its forward pass prepared (in the settings its card sets, where it is a
repository model: `model_settings`).

Used for the models a worker or stream member starts with and for those it loads on demand.
Each load logs how the model runs (`models.forward`), whether its compiled forward pass came
from the cache, and how long the whole load took:

    forward of efficientnet_lite0: compiled (6.1 ms/item against 8.8 eager when compiled;
    from the cache, 1.3 s to load), fp32, channels-last
    model efficientnet_lite0 loaded in 1.6 s

A model whose compiled forward pass is not in the cache serves eager at once and is compiled
meanwhile (`[worker] compile_background`); a second line says what it chose, and when:

    forward of efficientnet_lite0: eager (compiling in the background), fp32, channels-last
    forward of efficientnet_lite0: compiled (C ms/item against E eager; S s to compile;
    eager while compiling (T s, N batches), compiled from batch N+1), fp32, channels-last
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from inferstream.config import WorkerConfig
from inferstream.models import DEFAULT_MAX_PIXELS, LoadedModel, load_model
from inferstream.models.forward import ForwardReport, prepare_device_decode, prepare_forward
from inferstream.models.names import version_ref
from inferstream.models.repository import Repository, open_repository
from inferstream.models.repository.check import check_names, load_checked
from inferstream.models.repository.model import RepositoryModel
from inferstream.models.threads import plan_threads
from inferstream.schemas.records import split_ref
from inferstream.serving.hooks import WorkerHooks

log = logging.getLogger(__name__)

#: Builds a model by name, built-in or of the worker's repository (`NAME:VERSION` for one of
#: its versions), on the worker's device.
ModelLoader = Callable[[str], LoadedModel]


def model_loader(settings: WorkerConfig, device: str,
                 hooks: WorkerHooks | None = None) -> ModelLoader:
    """Loads models on `device` with the weights settings (`--weights` is the first
    `--model`'s), or from the model repository, and prepares their forward pass and decoding
    with the worker's thread plan. Blocks for the compile: call it before joining a group, or
    on a thread. RepositoryError (one line) for a repository model that cannot serve."""
    hooks = hooks or WorkerHooks()
    threads = plan_threads(device, settings.torch_threads, settings.decode_threads)
    repository = open_repository(settings.model_repository) if settings.model_repository \
        else None
    if repository is not None:  # a folder named like a built-in: refused (RepositoryError)
        check_names(repository, (), allow_python=settings.allow_python_models)

    def load(reference: str) -> LoadedModel:
        started = time.perf_counter()
        model = _load_weights(settings, repository, reference, device)
        options = model_settings(settings, model)

        def compiled(report: ForwardReport) -> None:  # a background compile's choice
            hooks.after_model_prepared(model.name, report.compiled, report.compile_s)

        report = prepare_forward(
            model, precision=options.precision, channels_last=options.channels_last == "on",
            compile_mode=options.compile, max_batch=options.max_batch,
            torch_threads=threads.torch_threads, cache_dir=settings.compile_cache_dir,
            background=compiled if settings.compile_background == "on" else None)
        log.info("%s", report.describe())
        if isinstance(model, RepositoryModel) and report.precision:
            model.check_prepared(report.precision, options.max_batch)
        decoding = prepare_device_decode(model, settings.decode_on_device,
                                         threads.decode_threads, options.max_batch)
        if decoding:
            log.info("%s", decoding)
        hooks.after_model_prepared(model.name, report.compiled, report.compile_s)
        log.info("model %s loaded in %.1f s", served_ref(model), time.perf_counter() - started)
        return model

    return load


def _load_weights(settings: WorkerConfig, repository: Repository | None, reference: str,
                  device: str) -> LoadedModel:
    """The model `reference` names, from the repository when it has it, else built in (with
    `--weights` for the first `--model`); its forward pass not prepared yet."""
    name, version = split_ref(reference)
    if repository is not None and name in repository:
        return load_checked(repository, name, device, allow_python=settings.allow_python_models,
                            max_pixels=DEFAULT_MAX_PIXELS, number=version)
    weights = settings.weights if settings.models and name == settings.models[0] else None
    return load_model(name, device=device, weights=weights,
                      random_weights=settings.random_weights)


def served_ref(model: LoadedModel) -> str:
    """What `model` answers, as a `model_ref` reference: a repository model's name and
    version (its number), a built-in's or a simulated model's name."""
    return version_ref(model.name, model.version)


def model_settings(settings: WorkerConfig, model: LoadedModel) -> WorkerConfig:
    """The worker's settings with those `model` sets for itself (a repository model's card:
    max_batch, compile, precision, channels_last), its max_batch no more than its program
    takes (a torch.export batch Dim's max), which would fail larger batches."""
    if not isinstance(model, RepositoryModel):
        return settings
    options = dataclasses.replace(settings, **model.settings())
    bound = model.program_max_batch
    if bound is not None and options.max_batch > bound:
        options = dataclasses.replace(options, max_batch=bound)
    return options
