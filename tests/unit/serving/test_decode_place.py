"""Where items decode: on the decode threads, several to a job where they are fast, and on
the event loop where they take microseconds and cannot wait on I/O (serving.decoding)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import torch

from inferstream.models import LoadedModel
from inferstream.models.sim import SimModel, SimParams
from inferstream.schemas.records import TaskItem
from inferstream.serving.decoding import INLINE_DECODE_S, DecodePlace
from inferstream.serving.hooks import WorkerHooks

from .test_batching_pipeline import run_tasks, task


class FilesModel(SimModel):
    """A sim model whose items are fetched as a file-reading model's are: by name, from I/O,
    unless their bytes came inline; notes the thread of each decode."""

    fetch_may_wait = LoadedModel.fetch_may_wait

    def __init__(self) -> None:
        super().__init__("sim:ms=0", SimParams(ms=0))
        self.threads: list[str] = []

    def preprocess(self, data: bytes) -> torch.Tensor:
        self.threads.append(threading.current_thread().name)
        return super().preprocess(data)


class NotingSimModel(FilesModel):
    fetch_may_wait = SimModel.fetch_may_wait


def items(count: int, data: bytes | None = None) -> list[TaskItem]:
    return [{"index": i, "name": f"item-{i}", "data": data} for i in range(count)]


def test_only_measured_fast_items_that_cannot_wait_on_io_decode_on_the_loop() -> None:
    sim, files = DecodePlace(NotingSimModel(), 2), DecodePlace(FilesModel(), 2)
    for place in (sim, files):
        assert not place.inline(items(1, b"x"))  # nothing measured yet
        place.learn([INLINE_DECODE_S / 100] * 4)
    assert sim.inline(items(16)) and not sim.inline(items(200))  # 200 take too long
    assert not files.inline(items(16))  # by name: a file or a download may stall
    assert files.inline(items(16, b"bytes"))  # inline bytes: no I/O
    assert not files.inline(items(15, b"bytes") + items(1))  # one by name keeps the job off
    for _ in range(10):  # items got slower: back to the threads
        sim.learn([2 * INLINE_DECODE_S])
    assert not sim.inline(items(1))

    waits = DecodePlace(SimModel("sim:ms=0,decode_ms=1", SimParams(ms=0, decode_ms=1)), 2)
    waits.learn([1e-9])
    assert not waits.inline(items(1))  # its fetch sleeps, as a download would


def test_decode_jobs_are_sized_to_the_items_measured_speed() -> None:
    place = DecodePlace(NotingSimModel(), 4)
    assert place.job_items(100, 32) == 1  # unmeasured: one item a job
    place.learn([1e-6])
    assert place.job_items(100, 32) == 8  # a batch's share of each of 4 threads
    assert place.job_items(6, 32) == 2  # each thread's share of what can start
    place.learn([]), place.learn([0.005] * 50)
    assert place.job_items(100, 32) == 1  # 5 ms items: one a job, every thread busy


def run_threads(model: FilesModel, data: bytes | None) -> list[str]:
    specs: list[dict[str, Any]] = [task(n, [f"i{n}-{i}" for i in range(8)]) for n in range(20)]
    for spec in specs:
        for item in spec["items"]:
            item["data"] = data
    done = asyncio.run(run_tasks(model, specs, WorkerHooks(), max_batch=8))
    assert all(o is not None and o["status"] == "OK" for r in done for o in r.outcomes)
    return model.threads


def test_fast_items_move_to_the_event_loop_and_items_read_from_files_stay() -> None:
    sim = run_threads(NotingSimModel(), None)
    assert sim[0].startswith("inferstream-decode")  # the first: unmeasured
    assert "MainThread" in sim

    assert "MainThread" in run_threads(FilesModel(), b"inline bytes")
    by_name = run_threads(FilesModel(), None)
    assert len(by_name) == 160 and all(t.startswith("inferstream-decode") for t in by_name)
