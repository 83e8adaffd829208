"""Where a batch's forward pass runs: on the event loop where it takes microseconds, else on
the inference thread, and never beside a calibration (serving.forward)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import torch

from inferstream.config import WorkerConfig
from inferstream.models.sim import SimModel, SimParams
from inferstream.serving import forward
from inferstream.serving.forward import (
    INLINE_FORWARD_S,
    RETRY_EVERY,
    RETRY_FACTOR,
    WINDOW,
    ForwardPlace,
)
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.pipeline import BatchingPipeline, TaskRun

from .test_batching_pipeline import run_tasks, task


class ThreadsModel(SimModel):
    """A sim model that notes the thread of each forward pass, and how many run at once; a
    calibration's passes wait for `release`."""

    def __init__(self, spec: str, params: SimParams) -> None:
        super().__init__(spec, params)
        self.threads: list[str] = []
        self.running = self.most_running = 0
        self.release = threading.Event()
        self.calibrating = threading.Event()
        self._lock = threading.Lock()

    def predict(self, batch: torch.Tensor, top_k: int) -> Any:
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if int(batch.reshape(-1)[0]) == int(self.synthetic_item()[0]):  # calibration
                self.calibrating.set()
                self.release.wait(5)
            else:
                self.threads.append(threading.current_thread().name)
            return super().predict(batch, top_k)
        finally:
            with self._lock:
                self.running -= 1


def test_a_place_runs_on_the_loop_only_what_it_measured_fast_on_a_cpu() -> None:
    place = ForwardPlace("cpu")
    assert not place.inline(1)  # nothing measured yet
    place.learn(32, 32 * INLINE_FORWARD_S / 100, on_loop=False)
    assert place.inline(32) and not place.inline(200)
    place.calibrating += 1
    assert not place.inline(1)
    place.calibrated()
    assert place.inline(1)
    for _ in range(10):  # the model slowed down: back to the inference thread
        place.learn(4, 8 * INLINE_FORWARD_S, on_loop=True)
    assert not place.inline(1)

    device = ForwardPlace("cuda")
    device.learn(32, 1e-9, on_loop=False)
    assert not device.inline(1)  # a device's pass overlaps the loop's work


def test_a_pass_slow_only_on_the_thread_is_tried_on_the_loop_now_and_then() -> None:
    """On the thread a pass's time includes its waits for the lock the loop holds: one
    measured there at a few times the limit is tried on the loop every RETRY_EVERY batches,
    and stays there where the loop measures it fast; one far slower is never tried."""
    place = ForwardPlace("cpu")
    place.learn(32, 3 * INLINE_FORWARD_S, on_loop=False)  # under RETRY_FACTOR x the limit
    decided = [place.inline(32) for _ in range(2 * RETRY_EVERY)]
    assert decided.count(True) == 2 and decided[RETRY_EVERY - 1] and decided[-1]
    place.learn(32, INLINE_FORWARD_S / 4, on_loop=True)  # the try: fast on the loop
    assert all(place.inline(32) for _ in range(3 * RETRY_EVERY))
    place.learn(32, 30 * INLINE_FORWARD_S, on_loop=True)  # one pass slowed by a neighbour
    assert place.inline(32)
    for _ in range(WINDOW):  # slow on the loop too, pass after pass
        place.learn(32, 30 * INLINE_FORWARD_S, on_loop=True)
    assert not any(place.inline(32) for _ in range(RETRY_EVERY - 1))

    slow = ForwardPlace("cpu")
    slow.learn(32, 2 * RETRY_FACTOR * INLINE_FORWARD_S, on_loop=False)
    assert not any(slow.inline(32) for _ in range(3 * RETRY_EVERY))


def test_a_fast_models_passes_move_to_the_event_loop_and_a_slow_ones_stay() -> None:
    fast = ThreadsModel("sim:ms=0", SimParams(ms=0))
    asyncio.run(run_tasks(fast, [task(n, [f"f{n}-{i}" for i in range(4)]) for n in range(40)],
                          WorkerHooks()))
    assert fast.threads[0].startswith("inferstream-infer")  # the first pass: unmeasured
    assert "MainThread" in fast.threads  # once its average is down from a cold first pass

    slow = ThreadsModel("sim:ms=1", SimParams(ms=1))  # 4 ms a batch of 4
    asyncio.run(run_tasks(slow, [task(n, [f"s{n}-{i}" for i in range(4)]) for n in range(4)],
                          WorkerHooks()))
    assert all(name.startswith("inferstream-infer") for name in slow.threads)


def test_no_pass_runs_on_the_loop_while_a_calibration_runs_on_the_thread() -> None:
    model = ThreadsModel("sim:ms=0", SimParams(ms=0))

    async def scenario() -> list[str]:
        pipeline = BatchingPipeline(model, WorkerConfig(max_batch=4, max_wait_ms=5),
                                    WorkerHooks())
        done: list[TaskRun] = []
        loop = asyncio.create_task(pipeline.run_forever())
        try:
            while model.threads[-1:] != ["MainThread"] and len(done) < 200:  # fast, measured
                passes = len(model.threads)
                pipeline.submit(TaskRun(task(0, ["a", "b", "c", "d"]), on_done=done.append))
                while len(model.threads) == passes:
                    await asyncio.sleep(0.001)
            while len(done) < len(model.threads):
                await asyncio.sleep(0.001)
            before = len(done)
            calibrating = asyncio.create_task(pipeline.calibrate(4))
            await asyncio.to_thread(model.calibrating.wait, 5)
            pipeline.submit(TaskRun(task(1, ["e", "f", "g", "h"]), on_done=done.append))
            await asyncio.sleep(0.05)
            waiting = len(done)  # the batch waits behind the calibration, not beside it
            model.release.set()
            assert await calibrating is not None
            while len(done) < before + 1:
                await asyncio.sleep(0.001)
        finally:
            loop.cancel()
            pipeline.close()
        assert waiting == before
        return model.threads[before - 1:]

    threads = asyncio.run(scenario())
    assert threads == ["MainThread", "inferstream-infer_0"]
    assert model.most_running == 1


def test_a_pass_on_the_loop_counts_its_cpu_time_unless_it_waited(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, slept = ForwardPlace.run_on_loop(lambda: time.sleep(0.02))
    assert slept >= 0.02  # a sleep is a wait: the loop waited for all of it
    # The counters are faked: a real pass may itself switch (another thread of the process
    # taking the GIL meanwhile), and then its wall time is the right answer, not this one's.
    for switches, expected in (([7, 7], 0.25), ([7, 8], 5.0)):
        waits, cpu, clock = iter(switches), iter([1.0, 1.25]), iter([0.0, 5.0])
        monkeypatch.setattr(forward, "_waits", lambda w=waits: next(w))
        monkeypatch.setattr(forward.time, "thread_time", lambda c=cpu: next(c))
        monkeypatch.setattr(forward.time, "perf_counter", lambda c=clock: next(c))
        total, took = ForwardPlace.run_on_loop(lambda: sum(range(1_000)))
        monkeypatch.undo()
        # 5 s on the clock, the cores busy with other processes: its own CPU time (0.25 s)
        # where it never waited, else the wall time it held the loop
        assert total == sum(range(1_000)) and took == pytest.approx(expected)
