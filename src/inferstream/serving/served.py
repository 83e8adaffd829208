"""The models a worker serves, each with its own batching pipeline.

A worker serves the models it was started with (`--model`, repeatable) and, with
`load_on_demand`, any other registry model a task asks for, loaded when the first such task
arrives; at most `max_loaded_models` stay loaded, the least recently used idle one going first.
A task is served only by its own model: `sim:` tasks are the exception, served by any `sim:`
model, because a simulated model's parameters describe the node's speed, not the model.

A repository model is served in several versions at once, each a pipeline of its own, kept
by its `versions.RepositoryWatch`: a task answered by the version it names, or by the newest
where it names none. A version that falls outside the policy is retired: it still answers the
tasks that name it (a job that runs on it keeps its version) and is still announced, and is
unloaded once none of its tasks is in flight and none has come for `retired_version_idle_s`.
A version whose folder is gone is taken out of service: it takes no new task and is unloaded
once none of its tasks is in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from inferstream.config import WorkerConfig
from inferstream.models import LoadedModel, ModelError, get_model_spec
from inferstream.models.names import has_versions
from inferstream.schemas.records import serves, split_ref, task_ref
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loader import ModelLoader, model_settings, served_ref
from inferstream.serving.pipeline import BatchingPipeline, TaskRun
from inferstream.serving.versions import RepositoryWatch

log = logging.getLogger(__name__)

#: The most task models `find` remembers its answer for (tasks name a handful).
_MOST_FOUND = 256
#: How long a model that failed to load on demand is declined before a task of it tries its
#: load again (`clock` seconds): the failure may pass (CUDA out of memory while another model
#: was loaded, a weights file being copied), and the worker declined the model until it was
#: restarted.
RETRY_LOAD_S = 300.0


class ServedModels:
    """The loaded models and their pipelines, by `served_ref`; `close()` stops every pipeline.

    With a model repository and a `loader`, its models' versions are kept by a
    `RepositoryWatch` (`watch`) from `start()` on; `clock` (monotonic seconds) times how long
    a retired version has had no task."""

    def __init__(self, settings: WorkerConfig, models: list[LoadedModel], hooks: WorkerHooks,
                 loader: ModelLoader | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.hooks = hooks
        self.loader = loader if settings.load_on_demand else None
        self.clock = clock
        self.pipelines: OrderedDict[str, BatchingPipeline] = OrderedDict()
        #: versions outside their policy that still answer the tasks naming them, by when
        #: (`clock`) the last of those came, unloaded once quiet (`unload_idle`)
        self.retired: dict[str, float] = {}
        #: versions whose folder is gone: no new task, unloaded once idle (`unload_idle`)
        self.withdrawn: set[str] = set()
        #: `find`'s answer (a pipeline's ref) by task model, until the models served change
        self._found: dict[str, str | None] = {}
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._loading: dict[str, asyncio.Future[BatchingPipeline]] = {}
        #: why each model that failed to load on demand cannot load, and when it failed
        self._unloadable: dict[str, tuple[str, float]] = {}
        self._waiting: set[asyncio.Task[None]] = set()
        #: why a model's batch loop ended with an error (a fault of the code): the worker
        #: stops on it, in words (`loop.Worker`), for its supervisor to start it again
        self.broken: str | None = None
        #: the pool's policy's batch size, by model name (`limit_batch`)
        self._batch_sizes: dict[str, int | None] = {}
        for model in models:
            self.pipelines[served_ref(model)] = BatchingPipeline(
                model, model_settings(settings, model), hooks)
        versioned = list(self.versions())
        self.watch = RepositoryWatch(settings, self, loader, versioned) \
            if loader is not None and settings.model_repository and versioned else None
        self._watching: asyncio.Task[None] | None = None
        if versioned:
            hooks.after_versions_changed(self.versions())

    @property
    def names(self) -> list[str]:
        """The models served, by name (a repository model once, whatever its versions)."""
        return list(dict.fromkeys(split_ref(ref)[0] for ref in self.pipelines))

    @property
    def references(self) -> list[str]:
        """What it serves, by name and version, a repository model's versions as
        `NAME:VERSION` each (retired ones in, those taken out of service left out)."""
        return sorted((ref for ref in self.pipelines if ref not in self.withdrawn),
                      key=lambda ref: (split_ref(ref)[0], split_ref(ref)[1] or 0))

    @property
    def retiring(self) -> set[str]:
        """The versions waiting to be unloaded: retired, or taken out of service."""
        return set(self.retired) | self.withdrawn

    def versions(self) -> dict[str, list[int]]:
        """The versions in service of each repository model (retired ones too: they answer
        the tasks that name them), oldest first, by name; what the worker announces."""
        found: dict[str, list[int]] = {}
        for ref in self.references:
            name, version = split_ref(ref)
            if version is not None:
                found.setdefault(name, []).append(version)
        return {name: sorted(versions) for name, versions in found.items()}

    @property
    def items_in_flight(self) -> int:
        return sum(p.items_in_flight for p in self.pipelines.values())

    def find(self, task_model: str) -> BatchingPipeline | None:
        """The loaded pipeline that serves `task_model` (a `model_ref`: the newest version in
        service, not a retired one, where it names none), marked as recently used (a retired
        version's quiet time starts again)."""
        if task_model not in self._found:  # asked twice a task: sorting them each time told
            named = split_ref(task_model)[1] is not None
            found = [ref for ref in self.references if serves(ref, task_model)
                     and (named or ref not in self.retired)]
            if len(self._found) >= _MOST_FOUND:
                self._found.clear()
            self._found[task_model] = max(found, key=lambda r: split_ref(r)[1] or 0) \
                if found else None
        ref = self._found[task_model]
        if ref is None:
            return None
        if ref in self.retired:
            self.retired[ref] = self.clock()
        self.pipelines.move_to_end(ref)
        return self.pipelines[ref]

    def refusal(self, task_model: str) -> str | None:
        """Why a task of `task_model` (a `model_ref`) cannot be served here, or None if it
        can (now or once loaded on demand)."""
        if self.find(task_model) is not None:
            return None
        if self.loader is None or has_versions(split_ref(task_model)[0]):
            return f"serves {', '.join(self.references)}, not {task_model}"
        try:
            get_model_spec(task_model)
        except ModelError as exc:
            return str(exc)
        failed = self._unloadable.get(task_model)
        if failed is not None and self.clock() - failed[1] >= RETRY_LOAD_S:
            del self._unloadable[task_model]  # its next task tries again
            return None
        return None if failed is None else failed[0]

    def submit(self, run: TaskRun) -> None:
        """Run `run` on the pipeline of its task's model, loading the model first where it
        is not loaded (see `refusal`); a model that cannot load refuses the run."""
        pipeline = self.find(task_ref(run.task))
        if pipeline is not None:
            pipeline.submit(run)
            return
        waiting = self.watched(asyncio.get_running_loop().create_task(
            self._load_then_submit(run), name=f"load of {task_ref(run.task)}"))
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
        """Load `task_model`; any failure is a ModelError (a load that raised another error,
        CUDA out of memory say, left the tasks that waited for it unanswered, and every
        later task of their partitions uncommitted)."""
        assert self.loader is not None  # noqa: S101 - refusal() said it can load
        log.info("loading model %s on demand", task_model)
        try:
            model = await asyncio.get_running_loop().run_in_executor(None, self.loader,
                                                                     task_model)
        except ModelError as exc:
            self._unloadable[task_model] = (f"cannot load {task_model}: {exc}", self.clock())
            raise
        except Exception as exc:  # refused as a ModelError is, its traceback logged once
            log.exception("loading model %s on demand failed", task_model)
            error = ModelError(f"{type(exc).__name__}: {exc}")
            self._unloadable[task_model] = (f"cannot load {task_model}: {error}", self.clock())
            raise error from exc
        self._evict()
        return self.add(model)

    def add(self, model: LoadedModel) -> BatchingPipeline:
        """Serve `model` (a model loaded on demand, or a new version of a repository model)
        beside the others, its batch loop started (inside the event loop)."""
        ref = served_ref(model)
        pipeline = BatchingPipeline(model, model_settings(self.settings, model), self.hooks)
        pipeline.limit_batch(self._batch_sizes.get(model.name))
        self.pipelines[ref] = pipeline
        self._found.clear()
        self._start(ref)
        if split_ref(ref)[1] is not None:
            self.hooks.after_versions_changed(self.versions())
        return pipeline

    def limit_batch(self, model: str, size: int | None) -> None:
        """Batches of `model` (every version) of at most `size` items, as the pool's policy
        recommends for this worker (None: the model's `max_batch`)."""
        self._batch_sizes[model] = size
        for ref, pipeline in self.pipelines.items():
            if split_ref(ref)[0] == model:
                pipeline.limit_batch(size)

    def retire(self, refs: Iterable[str]) -> None:
        """Retire the versions `refs` (outside their policy): a task that names one is still
        answered by it, one that names none goes to the newest, and each is unloaded once
        none of its tasks is in flight and none has come for `retired_version_idle_s`
        (`unload_idle`): a job that runs on it keeps its version."""
        retired = {ref for ref in refs if ref in self.pipelines} - self.retiring
        if not retired:
            return
        self.retired.update(dict.fromkeys(retired, self.clock()))
        self._found.clear()
        log.info("model %s retired: answers the tasks that name it until none has come for "
                 "%g s", ", ".join(sorted(retired)), self.settings.retired_version_idle_s)

    def restore(self, refs: Iterable[str]) -> None:
        """The retired versions among `refs` are back in the policy (a newer one's folder
        went): in service again."""
        restored = sorted(ref for ref in refs if ref in self.retired)
        for ref in restored:
            del self.retired[ref]
            log.info("model %s back in service", ref)
        if restored:
            self._found.clear()

    def withdraw(self, refs: Iterable[str]) -> None:
        """Take the versions `refs` (whose folder is gone) out of service: no new task, and
        each is unloaded once none of its tasks is in flight (`unload_idle`)."""
        withdrawn = {ref for ref in refs if ref in self.pipelines} - self.withdrawn
        if not withdrawn:
            return
        self.withdrawn |= withdrawn
        for ref in withdrawn:
            self.retired.pop(ref, None)
        self._found.clear()
        log.info("model %s out of service: unloaded once its tasks in flight are done",
                 ", ".join(sorted(withdrawn)))
        self.hooks.after_versions_changed(self.versions())
        self.unload_idle()

    def unload_idle(self) -> None:
        """Unload the versions out of service that no task is in flight on, and the retired
        ones that, besides, no task has come for in `retired_version_idle_s`."""
        now = self.clock()
        quiet = {ref for ref, last in self.retired.items()
                 if now - last >= self.settings.retired_version_idle_s}
        idle = [ref for ref in sorted(self.withdrawn | quiet)
                if self.pipelines[ref].items_in_flight == 0]
        for ref in idle:
            log.info("unloading model %s", ref)
            self._unload(ref)

    def _unload(self, ref: str) -> None:
        """Stop and drop `ref`'s pipeline; a retired version, still announced, is no more."""
        announced = self.retired.pop(ref, None) is not None
        self.withdrawn.discard(ref)
        self._loops.pop(ref).cancel()
        self.pipelines.pop(ref).close()
        self._found.clear()
        if announced:
            self.hooks.after_versions_changed(self.versions())

    def look_again(self) -> None:
        """Look at the model repository now (SIGHUP); thread-safe."""
        if self.watch is not None:
            self.watch.look_now()

    def _evict(self) -> None:
        """Make room for one more model: unload idle ones, least recently used first."""
        for name in list(self.pipelines):
            if len(self.pipelines) < self.settings.max_loaded_models:
                return
            if self.pipelines[name].items_in_flight == 0:
                log.info("unloading model %s (max_loaded_models=%d)", name,
                         self.settings.max_loaded_models)
                self._unload(name)

    def start(self) -> None:
        """Start the batch loop of every loaded model and the repository's watch (inside the
        event loop)."""
        for name in self.pipelines:
            self._start(name)
        if self.watch is not None:
            self._watching = asyncio.get_running_loop().create_task(
                self.watch.run(), name="repository-watch")

    def _start(self, name: str) -> None:
        self._loops[name] = self.watched(asyncio.get_running_loop().create_task(
            self.pipelines[name].run_forever(), name=f"batch-loop-{name}"))

    def watched(self, task: asyncio.Task[None]) -> asyncio.Task[None]:
        """`task`, which ends cancelled or without an error: a batch loop, a load on demand
        and the tasks it answers (a refusal's render), a render on a thread (`loop.Worker`).
        One that raised breaks the worker (`_ended`): its exception was lost, and the task
        it answered, and every later one of its partition, waited for ever."""
        task.add_done_callback(self._ended)
        return task

    def _ended(self, loop: asyncio.Task[None]) -> None:
        """A `watched` task that raised (a fault of the code: a render that raised again
        once its items were failed, say) is logged and breaks the worker (`broken`)."""
        if loop.cancelled() or loop.exception() is None:
            return
        exc = loop.exception()
        log.error("%s ended: %r", loop.get_name(), exc, exc_info=exc)
        self.broken = self.broken or (f"{loop.get_name()} ended: {exc!r}; the worker stops "
                                      "(its tasks in flight go to the next owner)")

    def close(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
        for waiting in list(self._waiting):
            waiting.cancel()
        for loop in self._loops.values():
            loop.cancel()
        for pipeline in self.pipelines.values():
            pipeline.close()
