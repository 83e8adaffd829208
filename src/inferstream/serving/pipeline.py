"""The worker's data path: decode items on a thread pool, batch them across tasks, infer.

Items are fetched and preprocessed in parallel on `decode_threads` threads, in arrival
order, at most `decode_ahead` batches ahead of the model: decoding overlaps with the forward
pass of the batch before, and fills its gaps instead of taking the cores in a burst when a
task arrives. Items that decode in microseconds go to the pool several at a time, or, where
their fetch cannot wait on I/O, decode on the event loop (`serving.decoding`). The batch loop
takes items in arrival order, up to `max_batch` items or
`max_wait_s` after the first one, and runs the model on a single inference thread (with
`torch_threads` intra-op threads) so that the event loop (and with it the Kafka heartbeats)
never waits for a forward pass; only a CPU model's pass measured under half a millisecond
runs on the loop itself, where the hand-off would cost more (`serving.forward`). A pass
that raises runs its items again in smaller batches, so that only the items that fail alone
fail (`serving.isolation`). Thread counts: `models.threads`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from inferstream.config import WorkerConfig
from inferstream.models import ItemError, LoadedModel
from inferstream.models.threads import plan_threads, thread_initializer
from inferstream.schemas.records import (
    Calibration,
    ItemResult,
    OutputFields,
    Task,
    TaskItem,
    error_item,
    ok_item,
)
from inferstream.serving.calibration import calibrate
from inferstream.serving.decoding import DecodePlace
from inferstream.serving.forward import ForwardPlace, output_fields
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.isolation import BatchFailures, forward_error, isolate
from inferstream.serving.tuning import LatencyTuner

log = logging.getLogger(__name__)

#: The decode outcome of an item of a task given up (its partition revoked)
_NOT_DECODED: tuple[torch.Tensor | str, float] = ("cancelled", 0.0)


def _ended(run: TaskRun) -> None:
    """What a run that has ended calls when done again: nothing."""


@dataclass
class TaskRun:
    """One task going through the data path, with the outcome of each item so far."""

    task: Task
    on_done: Callable[[TaskRun], None]
    started_at: float = field(default_factory=time.time)
    finished_at: float = 0.0
    decode_seconds: float = 0.0
    inference_seconds: float = 0.0
    outcomes: list[ItemResult | None] = field(default_factory=list)
    remaining: int = 0
    cancelled: bool = False
    #: some of its items went into a forward pass (or were answered): it is under way
    started: bool = False
    #: the model that runs the task, and its version (set by the pipeline it is submitted to)
    model: str = ""
    model_version: str | None = None
    #: why the task was not run after all (its model could not load); None: it was run
    refusal: str | None = None

    def __post_init__(self) -> None:
        self.outcomes = [None] * len(self.task["items"])
        self.remaining = len(self.outcomes)

    def record(self, position: int, outcome: ItemResult) -> None:
        self.started = True
        self.outcomes[position] = outcome
        self.remaining -= 1
        if self.remaining == 0:
            self.end()

    def refuse(self, reason: str) -> None:
        """End the run without running it, for `reason`."""
        self.refusal = reason
        self.remaining = 0
        self.end()

    def cancel(self) -> None:
        """Give the run up (its partition was): its items are neither decoded nor answered
        from now on, and nobody is called back; `on_done` goes as in `end`."""
        self.cancelled = True
        self.on_done = _ended

    def end(self) -> None:
        """Stamp the run finished and call `on_done`, once; then let go of it. The callback
        holds what holds this run (the worker's pending task, in its closure): kept, that
        cycle would hold the task's outcomes until the cyclic garbage collector found it,
        and a worker's full collections scanned every finished task's (BENCHMARKS.md, "The
        worker's garbage")."""
        self.finished_at = time.time()
        on_done, self.on_done = self.on_done, _ended
        on_done(self)

    @property
    def done(self) -> bool:
        return self.remaining == 0


@dataclass
class _Slot:
    """One item waiting for its batch: the decode future and where its outcome goes."""

    run: TaskRun
    position: int
    #: the decode job that takes it, and its place in the job's outcomes (set as it starts)
    job: asyncio.Future[list[tuple[torch.Tensor | str, float]]] | None = None
    place: int = 0


class BatchingPipeline:
    """Decode -> batch -> infer for the items of many tasks; calls `TaskRun.on_done`.

    Uses `max_batch`, `max_wait_ms`, `torch_threads`, `decode_threads`, `decode_ahead`,
    `http_timeout_s` and `max_item_bytes` of the worker's settings; a batch takes at most
    `batch_limit` items (`max_batch`, or less: the pool's policy's, `limit_batch`), and with
    `latency_target_ms` a `LatencyTuner` sets its size under that and its wait.
    """

    def __init__(self, model: LoadedModel, options: WorkerConfig, hooks: WorkerHooks) -> None:
        self.model = model
        self.options = options
        self.ceiling = options.max_batch
        self.tuner = None if options.latency_target_ms is None else LatencyTuner(
            options.latency_target_ms / 1000, options.max_batch, options.max_wait_ms / 1000)
        self.hooks = hooks
        self.threads = plan_threads(str(model.device), options.torch_threads,
                                    options.decode_threads)
        self._decoders = ThreadPoolExecutor(self.threads.decode_threads, "inferstream-decode",
                                            initializer=thread_initializer(1))
        self._inference = ThreadPoolExecutor(
            1, "inferstream-infer", initializer=thread_initializer(self.threads.torch_threads))
        self._place = ForwardPlace(model.device)
        self._failures = BatchFailures()
        self._queue: asyncio.Queue[_Slot] = asyncio.Queue()
        #: items waiting for their decode to start, in arrival order
        self._undecoded: deque[tuple[_Slot, TaskItem]] = deque()
        #: items decoding or decoded that no batch has taken yet, and how many may be
        self._ahead = 0
        self._ahead_limit = max(1, options.decode_ahead) * options.max_batch
        self._decode_place = DecodePlace(model, self.threads.decode_threads)
        self.items_in_flight = 0

    def limit_batch(self, size: int | None) -> None:
        """Batches of at most `size` items from the next one on (None: `max_batch`); never
        above `max_batch`, which a compiled forward pass may have been prepared for."""
        limit = max(1, min(size or self.options.max_batch, self.options.max_batch))
        if limit != self.ceiling:
            log.info("model=%s batch size %d -> %d (the pool's policy)", self.model.name,
                     self.ceiling, limit)
            self.ceiling = limit
            if self.tuner is not None:
                self.tuner.set_ceiling(limit)

    @property
    def batch_limit(self) -> int:
        return self.ceiling if self.tuner is None else self.tuner.limit

    @property
    def max_wait_s(self) -> float:
        return self.options.max_wait_ms / 1000 if self.tuner is None else self.tuner.wait_s

    def submit(self, run: TaskRun) -> None:
        """Queue every item of `run` for decoding; outcomes arrive through the batch loop."""
        run.model, run.model_version = self.model.name, self.model.version
        if not run.outcomes:
            run.end()
            return
        for position, item in enumerate(run.task["items"]):
            slot = _Slot(run, position)
            self._queue.put_nowait(slot)
            self._undecoded.append((slot, item))
            self.items_in_flight += 1
        self._decode_ahead()

    def _decode_ahead(self) -> None:
        """Start decoding queued items, in order, up to `decode_ahead` batches ahead of the
        batch loop. The batch loop only takes items from the head of the queue, and at most
        `max_batch` (`batch_limit` is no more), so every item it waits for has started
        decoding."""
        loop = asyncio.get_running_loop()
        startable = min(len(self._undecoded), self._ahead_limit - self._ahead)
        while self._undecoded and self._ahead < self._ahead_limit:
            size = min(self._decode_place.job_items(startable, self.batch_limit),
                       self._ahead_limit - self._ahead, len(self._undecoded))
            job = [self._undecoded.popleft() for _ in range(size)]
            if self._decode_place.inline([item for _, item in job]):
                decoding = loop.create_future()
                try:  # fails as a decode thread's job would: where the batch loop awaits it
                    decoding.set_result(self._decode_all(job))
                except Exception as exc:  # handed on to the batch loop, not swallowed
                    decoding.set_exception(exc)
            else:
                decoding = loop.run_in_executor(self._decoders, self._decode_all, job)
            decoding.add_done_callback(self._learn)
            for place, (slot, _) in enumerate(job):
                slot.job, slot.place = decoding, place
            self._ahead += size

    def _decode_all(self, job: list[tuple[_Slot, TaskItem]]
                    ) -> list[tuple[torch.Tensor | str, float]]:
        return [self._decode(slot.run, item) for slot, item in job]

    def _learn(self, decoding: asyncio.Future[list[tuple[torch.Tensor | str, float]]]
               ) -> None:
        """Learn how long an item takes to decode from a decode job that ended."""
        if decoding.cancelled() or decoding.exception() is not None:
            return  # (the pool shut down; the batch loop that awaits it ends)
        # the items of a task given up took no time: they were not decoded at all
        self._decode_place.learn(
            outcome[1] for outcome in decoding.result() if outcome is not _NOT_DECODED)

    def _decode(self, run: TaskRun, item: TaskItem) -> tuple[torch.Tensor | str, float]:
        """Fetch and preprocess one item; a bad item becomes its error reason (a str), and
        an item of a task given up (its partition revoked) is not decoded at all."""
        if run.cancelled:
            return _NOT_DECODED
        started = time.perf_counter()
        try:
            data = self.model.fetch(
                item["name"], item.get("data"),
                http_timeout_s=self.options.http_timeout_s, max_bytes=self.options.max_item_bytes,
            )
            tensor: torch.Tensor | str = self.model.preprocess(data)
        except ItemError as exc:
            tensor = exc.reason
        except Exception as exc:  # the worker never crashes on input
            log.exception("unexpected error decoding item %r", item["name"])
            tensor = f"internal error: {type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - started
        self.hooks.after_decode(self.model.name, seconds, not isinstance(tensor, str))
        return tensor, seconds

    async def run_forever(self) -> None:
        """The batch loop: runs until cancelled. A batch taken with a batch of items or
        more waiting goes to `after_batch_cycle` with the loop's time since the batch before:
        the worker's speed when it has work, which the forward pass alone overstates where
        decoding, or the process's other work, sets the pace."""
        while True:
            await self._one_batch()

    async def _one_batch(self) -> None:
        """Take the next batch and run it. Its items go with this frame: a loop's local
        would hold the last batch's tasks, and their outcomes, until the next batch came."""
        backlogged = self._queue.qsize() >= self.batch_limit
        started = time.perf_counter()
        batch = await self._next_batch()
        answered = await self._infer(batch)
        if backlogged and answered:
            self.hooks.after_batch_cycle(self.model.name, answered,
                                         time.perf_counter() - started, self.model.version)

    async def _next_batch(self) -> list[_Slot]:
        first = await self._queue.get()
        batch = [first]
        deadline = time.monotonic() + self.max_wait_s
        while len(batch) < self.batch_limit:
            if self._queue.empty():
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), timeout))
                except TimeoutError:
                    break
            else:
                batch.append(self._queue.get_nowait())
        return batch

    async def _infer(self, batch: list[_Slot]) -> int:
        """Run `batch` and answer its items; how many it answered (those of tasks given up
        meanwhile are not)."""
        good, answered = await self._decoded(batch)
        if not good:
            return answered
        for slot, _ in good:
            slot.run.started = True
        top_k, tensors = max(s.run.task["top_k"] for s, _ in good), [t for _, t in good]
        started = time.perf_counter()
        try:
            forward = functools.partial(self._forward, tensors, top_k)
            if on_loop := self._place.inline(len(tensors)):  # (serving.forward: microseconds)
                predictions, took = self._place.run_on_loop(forward)
            else:
                predictions, took = await asyncio.get_running_loop().run_in_executor(
                    self._inference, self._place.run_on_thread, forward)
        except Exception as exc:  # a failed forward pass fails the items that fail alone
            self._failures.log(len(good), exc)
            outputs = await self._isolate(tensors, top_k, exc)
            for (slot, _), output in zip(good, outputs, strict=True):
                self._answer(slot, output)
            return answered
        seconds = time.perf_counter() - started
        self._place.learn(len(tensors), took, on_loop)
        if self.tuner is not None:
            self.tuner.observe(len(batch), seconds)
        self.hooks.after_batch(self.model.name, len(good), seconds, self.model.version)
        for (slot, _), output in zip(good, predictions, strict=True):
            slot.run.inference_seconds += seconds / len(good)
            self._answer(slot, output)
        return answered

    async def _decoded(self, batch: list[_Slot]
                       ) -> tuple[list[tuple[_Slot, torch.Tensor]], int]:
        """The items of `batch` that decoded, once all have, with how many of the batch are
        answered: those that failed to decode are, here; those of tasks given up are not."""
        decoded = []
        for slot in batch:
            assert slot.job is not None  # noqa: S101 - every item a batch takes is decoding
            tensor, seconds = (await slot.job)[slot.place]
            slot.run.decode_seconds += seconds
            decoded.append(tensor)
        self._ahead -= len(batch)
        self._decode_ahead()  # the next batches decode while this one runs
        good: list[tuple[_Slot, torch.Tensor]] = []
        answered = len(batch)
        for slot, tensor in zip(batch, decoded, strict=True):
            if slot.run.cancelled:  # its partition was given up: nobody wants the outcome
                self.items_in_flight -= 1
                answered -= 1
            elif isinstance(tensor, str):
                self._finish(slot, error_item(_item(slot), tensor))
            else:
                good.append((slot, tensor))
        return good, answered

    def _answer(self, slot: _Slot, output: OutputFields | str) -> None:
        """Finish `slot` with its output, or (a str) why its decoding, finished in the batch,
        failed."""
        if isinstance(output, str):
            self._finish(slot, error_item(_item(slot), output))
            return
        top_k, wanted = output["top_k"], slot.run.task["top_k"]
        self._finish(slot, ok_item(_item(slot), top_k if len(top_k) <= wanted else top_k[:wanted],
                                   embedding=output["embedding"], tensors=output["tensors"]))

    async def _isolate(self, tensors: list[torch.Tensor], top_k: int, failure: Exception
                       ) -> list[OutputFields | str]:
        """The outputs of a batch whose pass raised `failure`, or each item's reason, from its
        items run again in smaller batches on the inference thread (`serving.isolation`)."""
        forward = functools.partial(self._forward, top_k=top_k)
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._inference, isolate, forward, tensors, failure)
        except RuntimeError:  # closed meanwhile (the model was unloaded): no thread for it
            return [forward_error(failure)] * len(tensors)

    def _forward(self, tensors: list[torch.Tensor], top_k: int) -> list[OutputFields | str]:
        """The batch's outputs."""
        return [item if isinstance(item, str) else output_fields(item)
                for item in self.model.predict_items(tensors, top_k)]

    async def calibrate(self, items: int) -> Calibration | None:
        """The model's speed on a batch of `items` synthetic items (at most `max_batch`; see
        `calibration.calibrate`), run on the inference thread between two batches; None
        where it cannot be measured or the pipeline was closed meanwhile."""
        try:
            running = asyncio.get_running_loop().run_in_executor(
                self._inference, calibrate, self.model, min(items, self.options.max_batch))
        except RuntimeError:  # closed: the model was unloaded
            return None
        self._place.calibrating += 1  # no pass on the loop beside it, until it ends
        running.add_done_callback(self._place.calibrated)
        # a close meanwhile cancels the batch, which must not cancel the caller (the sysinfo
        # publisher's loop): wait, rather than await it
        await asyncio.wait([running])
        return None if running.cancelled() else running.result()

    def _finish(self, slot: _Slot, outcome: ItemResult) -> None:
        self.items_in_flight -= 1
        slot.run.record(slot.position, outcome)

    def close(self) -> None:
        self._decoders.shutdown(wait=False, cancel_futures=True)
        self._inference.shutdown(wait=False, cancel_futures=True)


def _item(slot: _Slot) -> TaskItem:
    return slot.run.task["items"][slot.position]
