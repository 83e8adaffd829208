"""The models a worker serves, each with its own batching pipeline.

A worker serves the models it was started with (`--model`, repeatable) and, with
`load_on_demand`, any other registry model a task asks for, loaded when the first such task
arrives; at most `max_loaded_models` stay loaded, the least recently used idle one going first.
A task is served only by its own model: `sim:` tasks are the exception, served by any `sim:`
model, because a simulated model's parameters describe the node's speed, not the model.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from inferstream.config import WorkerConfig
from inferstream.models import LoadedModel, ModelError, get_model_spec
from inferstream.schemas.records import serves
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loader import ModelLoader, model_settings
from inferstream.serving.pipeline import BatchingPipeline, TaskRun

log = logging.getLogger(__name__)


class ServedModels:
    """The loaded models and their pipelines; `close()` stops every pipeline."""

    def __init__(self, settings: WorkerConfig, models: list[LoadedModel], hooks: WorkerHooks,
                 loader: ModelLoader | None = None) -> None:
        self.settings = settings
        self.hooks = hooks
        self.loader = loader if settings.load_on_demand else None
        self.pipelines: OrderedDict[str, BatchingPipeline] = OrderedDict()
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._loading: dict[str, asyncio.Future[BatchingPipeline]] = {}
        self._unloadable: dict[str, str] = {}
        self._waiting: set[asyncio.Task[None]] = set()
        for model in models:
            self.pipelines[model.name] = BatchingPipeline(
                model, model_settings(settings, model), hooks)

    @property
    def names(self) -> list[str]:
        return list(self.pipelines)

    @property
    def items_in_flight(self) -> int:
        return sum(p.items_in_flight for p in self.pipelines.values())

    def find(self, task_model: str) -> BatchingPipeline | None:
        """The loaded pipeline that serves `task_model`, marked as recently used."""
        for name, pipeline in self.pipelines.items():
            if serves(name, task_model):
                self.pipelines.move_to_end(name)
                return pipeline
        return None

    def refusal(self, task_model: str) -> str | None:
        """Why a task of `task_model` cannot be served here, or None if it can (now or once
        loaded on demand)."""
        if self.find(task_model) is not None:
            return None
        if self.loader is None:
            return f"serves {', '.join(self.names)}, not {task_model}"
        try:
            get_model_spec(task_model)
        except ModelError as exc:
            return str(exc)
        return self._unloadable.get(task_model)

    def submit(self, run: TaskRun) -> None:
        """Run `run` on the pipeline of its task's model, loading the model first where it
        is not loaded (see `refusal`); a model that cannot load refuses the run."""
        pipeline = self.find(run.task["model"])
        if pipeline is not None:
            pipeline.submit(run)
            return
        waiting = asyncio.get_running_loop().create_task(self._load_then_submit(run))
        self._waiting.add(waiting)
        waiting.add_done_callback(self._waiting.discard)

    async def _load_then_submit(self, run: TaskRun) -> None:
        model = run.task["model"]
        try:
            pipeline = await self.load(model)
        except ModelError as exc:
            run.refuse(f"cannot load {model}: {exc}")
            return
        if not run.cancelled:
            pipeline.submit(run)

    async def load(self, task_model: str) -> BatchingPipeline:
        """The pipeline of `task_model`, loading the model first (ModelError if it fails)."""
        found = self.find(task_model)
        if found is not None:
            return found
        pending = self._loading.get(task_model)
        if pending is None:
            pending = asyncio.ensure_future(self._load(task_model))
            self._loading[task_model] = pending
            pending.add_done_callback(lambda _f: self._loading.pop(task_model, None))
        return await asyncio.shield(pending)

    async def _load(self, task_model: str) -> BatchingPipeline:
        assert self.loader is not None  # noqa: S101 - refusal() said it can load
        log.info("loading model %s on demand", task_model)
        try:
            model = await asyncio.get_running_loop().run_in_executor(None, self.loader,
                                                                     task_model)
        except ModelError as exc:
            self._unloadable[task_model] = f"cannot load {task_model}: {exc}"
            raise
        self._evict()
        pipeline = BatchingPipeline(model, model_settings(self.settings, model),
                                     self.hooks)
        self.pipelines[model.name] = pipeline
        self._start(model.name)
        return pipeline

    def _evict(self) -> None:
        """Make room for one more model: unload idle ones, least recently used first."""
        for name in list(self.pipelines):
            if len(self.pipelines) < self.settings.max_loaded_models:
                return
            if self.pipelines[name].items_in_flight == 0:
                log.info("unloading model %s (max_loaded_models=%d)", name,
                         self.settings.max_loaded_models)
                self._loops.pop(name).cancel()
                self.pipelines.pop(name).close()

    def start(self) -> None:
        """Start the batch loop of every loaded model (inside the event loop)."""
        for name in self.pipelines:
            self._start(name)

    def _start(self, name: str) -> None:
        self._loops[name] = asyncio.get_running_loop().create_task(
            self.pipelines[name].run_forever(), name=f"batch-loop-{name}")

    def close(self) -> None:
        for waiting in list(self._waiting):
            waiting.cancel()
        for loop in self._loops.values():
            loop.cancel()
        for pipeline in self.pipelines.values():
            pipeline.close()
