"""The worker's forward pass: where it runs, and the result fields of what it answers.

A batch's pass runs on the inference thread, or on the event loop itself where it takes less
time than handing it to that thread costs.

A hand-off to the inference thread costs the event loop a queue put that wakes the thread (a
futex wake, tens of microseconds in a VM), a callback back through the loop's self-pipe and
two futures' copies (BENCHMARKS.md, "A fast model's forward pass on the event loop"). Where a
CPU model's whole batch takes less than `INLINE_FORWARD_S`, as a `sim:ms=0` batch or a small
tabular model does, that hand-off is most of the batch's cost and buys nothing: the loop
waits less for the pass itself than a heartbeat or a fetch would notice. Every other pass
(GPU models, where the pass overlaps the loop's work, and anything slower) stays on the
inference thread, and so does every pass while a calibration runs there, so that the model
is never called from two threads at once.

What a pass takes is measured where it ran, and neither place measures it plainly. On the
thread its time includes its waits for the lock (the GIL) that the loop holds meanwhile, more
of them the busier the loop: a pass measured there at a few times the limit is tried on the
loop now and then (`RETRY_EVERY`). On the loop a pass that never waited itself counts its CPU
time, not the turns other processes took on the cores meanwhile; one that waited (a sleep, a
lock, I/O) its wall time. Each place's estimate is the least of its last `WINDOW` passes, so
that one pass slowed by a neighbour does not send the next ones away. On a busy 2-core machine
the passes of `sim:ms=0` batches of 32 measured 0.3-0.9 ms on the thread and 0.5-2.2 ms (wall)
on the loop, 0.25-0.33 ms of their own CPU: a moving average of either kept most of them on
the thread (BENCHMARKS.md, "Forward passes measured by their own time").
"""

from __future__ import annotations

import resource
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from inferstream.models.outputs import Embedding, ItemOutput, Tensors
from inferstream.schemas.records import NamedTensor, OutputFields, Prediction

#: A CPU forward pass expected to take less than this runs on the event loop.
INLINE_FORWARD_S = 0.0005
#: A pass measured on the inference thread at under this many times `INLINE_FORWARD_S` is
#: tried on the loop again every `RETRY_EVERY` batches: on the thread its time includes its
#: waits for the lock (the GIL) that the loop holds meanwhile, which the loop would not have.
RETRY_FACTOR = 8
RETRY_EVERY = 32
#: A place's estimate of an item's time is the least of its last `WINDOW` passes': a pass
#: slowed by what else ran meanwhile (a lock's hand-over, other processes on the cores) is
#: not the pass's own time, and one pass's outlier would hold a moving average up for many.
WINDOW = 8

_Result = TypeVar("_Result")


class ForwardPlace:
    """Decides where each batch's forward pass runs, from the passes measured so far: those
    measured on the event loop, where what the loop waits is the pass alone, and those
    measured on the inference thread, which may include waits for the lock."""

    def __init__(self, device: torch.device | str) -> None:
        self._cpu = torch.device(device).type == "cpu"
        #: seconds an item took in the last passes on the loop / on the thread
        self._loop: deque[float] = deque(maxlen=WINDOW)
        self._thread: deque[float] = deque(maxlen=WINDOW)
        #: calibrations running on the inference thread now
        self.calibrating = 0
        self._on_thread = 0  # batches on the thread since the last one tried on the loop

    def inline(self, items: int) -> bool:
        """Whether the next batch, of `items`, runs on the event loop: a CPU model's, no
        calibration running, measured to take less than `INLINE_FORWARD_S` for that many
        (on the loop where it was measured there, else on the thread), or due for a retry."""
        if not self._cpu or self.calibrating:
            return False
        measured = min(self._loop or self._thread, default=None)
        if measured is not None and measured * items < INLINE_FORWARD_S:
            return True
        self._on_thread += 1
        retry = (bool(self._thread) and self._on_thread >= RETRY_EVERY
                 and min(self._thread) * items < RETRY_FACTOR * INLINE_FORWARD_S)
        if retry:
            self._on_thread = 0
        return retry

    @staticmethod
    def run_on_thread(forward: Callable[[], _Result]) -> tuple[_Result, float]:
        """Run `forward` on the calling (inference) thread: its result, and its wall time
        there (its waits for the lock included: see the module's doc)."""
        started = time.perf_counter()
        result = forward()
        return result, time.perf_counter() - started

    @staticmethod
    def run_on_loop(forward: Callable[[], _Result]) -> tuple[_Result, float]:
        """Run `forward` here, on the loop: its result, and the seconds the loop waited for
        it. That is its CPU time where it never waited itself (no sleep, lock or I/O: no
        voluntary context switch), so that other processes' turns on the cores meanwhile do
        not count against it; else its wall time."""
        switches, cpu, started = _waits(), time.thread_time(), time.perf_counter()
        result = forward()
        if switches is None or _waits() != switches:
            return result, time.perf_counter() - started
        return result, time.thread_time() - cpu

    def calibrated(self, _: Any = None) -> None:
        """A calibration on the inference thread ended (a done callback)."""
        self.calibrating -= 1

    def learn(self, items: int, seconds: float, on_loop: bool) -> None:
        """A forward pass of `items` items took `seconds`, on the loop or on the thread."""
        if items > 0:
            (self._loop if on_loop else self._thread).append(seconds / items)


def _waits() -> int | None:
    """The calling thread's voluntary context switches so far (None where the platform does
    not count a thread's: not Linux). (Its CPU time comes from `time.thread_time`, to the
    nanosecond: getrusage's is too coarse for a pass of a few hundred microseconds.)"""
    who = getattr(resource, "RUSAGE_THREAD", None)
    return None if who is None else resource.getrusage(who).ru_nvcsw


def output_fields(output: ItemOutput) -> OutputFields:
    """The result fields that hold one item's output, by its kind: top-k predictions, an
    embedding or named tensors."""
    if isinstance(output, Embedding):
        return OutputFields(top_k=[], embedding=list(output.vector), tensors=[])
    if isinstance(output, Tensors):
        return OutputFields(top_k=[], embedding=None, tensors=[
            NamedTensor(name=t.name, dtype=t.dtype, shape=list(t.shape), data=t.data)
            for t in output.tensors])
    # dict displays: half the time of Prediction(...) and OutputFields(...) calls
    top_k: list[Prediction] = [{"class_id": c, "label": label, "score": float(s)}
                               for c, label, s in output]
    return {"top_k": top_k, "embedding": None, "tensors": []}
