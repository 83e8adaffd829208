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
"""

from __future__ import annotations

from typing import Any

import torch

from inferstream.models.outputs import Embedding, ItemOutput, Tensors
from inferstream.schemas.records import NamedTensor, OutputFields, Prediction

#: A CPU forward pass expected to take less than this runs on the event loop.
INLINE_FORWARD_S = 0.0005
#: The weight of the latest batch in the moving average of an item's forward time.
_NEWEST = 0.2


class ForwardPlace:
    """Decides where each batch's forward pass runs, from the passes measured so far."""

    def __init__(self, device: torch.device | str) -> None:
        self._cpu = torch.device(device).type == "cpu"
        #: seconds one item takes in a forward pass, a moving average (None: none measured)
        self.item_s: float | None = None
        #: calibrations running on the inference thread now
        self.calibrating = 0

    def inline(self, items: int) -> bool:
        """Whether a batch of `items` runs on the event loop: a CPU model's, measured to take
        less than `INLINE_FORWARD_S` for that many, and no calibration running."""
        return (self._cpu and self.calibrating == 0 and self.item_s is not None
                and self.item_s * items < INLINE_FORWARD_S)

    def calibrated(self, _: Any = None) -> None:
        """A calibration on the inference thread ended (a done callback)."""
        self.calibrating -= 1

    def learn(self, items: int, seconds: float) -> None:
        """A forward pass of `items` items took `seconds`, wherever it ran."""
        if items <= 0:
            return
        took = seconds / items
        self.item_s = took if self.item_s is None else (
            (1 - _NEWEST) * self.item_s + _NEWEST * took)


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
