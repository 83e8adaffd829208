"""A forward pass that raised: which of its items fail alone, so that only they fail.

One item that makes the model raise (an input out of the range its code accepts) would
otherwise fail every item batched with it. `isolate` runs the batch's items again in halves,
the first half first, each failing half in halves again, down to single items: a half that
passes answers its items, an item that fails alone fails with its own error. With `b` such
items in a batch of `n` that takes about `2 b log2(n / b)` passes, nothing at all where no
pass raised.

Bound: a model that fails every input would take `2 n - 1` passes for each of its batches
(127 for 64), for as long as it runs. A recovery in which `HOPELESS_AFTER` items have failed
alone before any of its passes succeeded takes the model to fail for every input: the items
not tried alone yet fail with the batch's error, untried. That costs such a model
`2 HOPELESS_AFTER + log2(n / HOPELESS_AFTER) - 1` passes a batch, the first one included (18
for 64), and fails a good item wrongly only where the first `HOPELESS_AFTER` items of its
batch all fail alone. Each batch is judged afresh: a model that fails some inputs for a while
is not taken to fail them all from then on.

Not split: an out-of-memory or a device error (`splittable`). Those say nothing of any item,
and a device's error leaves it unusable for the passes after it: the batch's items fail
with it, as they always did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import torch

from inferstream.models.errors import error_line

log = logging.getLogger(__name__)

#: Items failed alone, with no pass succeeded, after which a recovery gives the rest up.
HOPELESS_AFTER = 8
#: Errors of the device or of memory, by type and by what torch's messages say of them.
_DEVICE_ERRORS = (torch.OutOfMemoryError, torch.AcceleratorError, MemoryError)
_DEVICE_MARKERS = ("out of memory", "can't allocate memory", "CUDA error", "CUBLAS_STATUS_",
                   "CUDNN_STATUS_", "cuDNN error", "device-side assert", "HIP error")

_Item = TypeVar("_Item")
_Output = TypeVar("_Output")


def splittable(exc: BaseException) -> bool:
    """Whether a batch whose pass raised `exc` is worth running again in parts: not for an
    out-of-memory or a device error."""
    if isinstance(exc, _DEVICE_ERRORS):
        return False
    message = str(exc)
    return not any(marker in message for marker in _DEVICE_MARKERS)


class BatchFailures:
    """How a failed forward pass is logged: with its traceback the first time an exception
    of its type fails this model's batches, in one line after that (a handler whose items
    differ in shape fails every batch that mixes them, and logged a traceback for each)."""

    def __init__(self) -> None:
        self._traced: set[str] = set()

    def log(self, items: int, exc: BaseException) -> None:
        kind = type(exc).__name__
        if kind in self._traced:
            log.warning("inference failed for a batch of %d items: %s (its traceback is "
                        "logged at the first %s)", items, error_line(exc), kind)
            return
        self._traced.add(kind)
        log.error("inference failed for a batch of %d items", items, exc_info=exc)


def forward_error(exc: BaseException) -> str:
    """The reason of an item whose forward pass raised `exc`."""
    return f"inference failed: {error_line(exc)}"


def isolate(forward: Callable[[Sequence[_Item]], list[_Output]], items: Sequence[_Item],
            failure: BaseException) -> list[_Output | str]:
    """The output of each of `items`, whose pass together raised `failure`, or why it failed
    (a str, `forward_error`): found by running them again in smaller batches (the module's
    doc: the order, the bound, and the errors that are not split). Runs `forward` on the
    calling thread; it never raises."""
    recovery = _Recovery(forward, items, failure)
    if splittable(failure) and len(items) > 1:
        recovery.split(0, len(items))
    return [forward_error(recovery.stop or failure) if output is None else output
            for output in recovery.outputs]


class _Recovery(Generic[_Item, _Output]):
    """One batch's items run again: their outcomes so far, and whether to go on."""

    def __init__(self, forward: Callable[[Sequence[_Item]], list[_Output]],
                 items: Sequence[_Item], failure: BaseException) -> None:
        self.forward, self.items, self.failure = forward, items, failure
        self.outputs: list[_Output | str | None] = [None] * len(items)
        self.passed = False
        self.failed_alone = 0
        #: why the items not answered yet fail untried (a device error, or the batch's own
        #: error where the model fails every input); None while the recovery goes on
        self.stop: BaseException | None = None

    def split(self, start: int, end: int) -> None:
        """Run the halves of `items[start:end]`, whose pass together raised, the first one
        first."""
        middle = (start + end) // 2
        for part in ((start, middle), (middle, end)):
            if self.stop is None:
                self.run(*part)

    def run(self, start: int, end: int) -> None:
        """Run `items[start:end]` in one pass: answer them, or split them on."""
        try:
            outputs = self.forward(self.items[start:end])
        except Exception as exc:  # the model's own code raises anything
            self.failed(start, end, exc)
            return
        self.outputs[start:end] = outputs
        self.passed = True

    def failed(self, start: int, end: int, exc: Exception) -> None:
        if not splittable(exc):
            self.stop = exc
        elif end - start > 1:
            self.split(start, end)
        else:
            self.outputs[start] = forward_error(exc)
            self.failed_alone += 1
            if not self.passed and self.failed_alone >= HOPELESS_AFTER:
                log.warning("the first %d items of a batch of %d each failed alone: the "
                            "model is taken to fail for every input, and the others fail "
                            "untried", self.failed_alone, len(self.items))
                self.stop = self.failure
