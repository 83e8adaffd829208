"""Where the worker decodes items: how many go to a decode thread at once, and which decode on
the event loop itself.

Items decode on `decode_threads` threads, several to a job where they decode fast: a job per
item costs the event loop about 20 us of thread hop, more than a fast item's whole decode. An
item that decodes in microseconds and whose fetch cannot wait on I/O (its bytes came inline, or
a `sim:` model's) decodes on the event loop instead: there the hand-off (a queue put that wakes
a thread, a callback back through the loop's self-pipe) is most of its cost and buys nothing,
as it is for a forward pass of that size (`serving.forward`). It was a third to a half of the
data path's CPU an item for `sim:ms=0` items (BENCHMARKS.md, "Fast items decode on the event
loop"). An item named by a path or URL never does: a file on a stalled disk or a download
would stop the loop, and with it the members' heartbeats and commits, for as long as it takes.
"""

from __future__ import annotations

from collections.abc import Iterable

from inferstream.models import LoadedModel
from inferstream.schemas.records import TaskItem
from inferstream.serving.forward import INLINE_FORWARD_S

#: A decode job takes as many items as decode in about this long (at least one).
DECODE_JOB_S = 0.001
#: A decode job of items that cannot wait on I/O, measured to take less than this in all,
#: runs on the event loop: the loop waits for it no longer than for a forward pass there.
INLINE_DECODE_S = INLINE_FORWARD_S
#: The weight of the latest job in the moving average of an item's decode time.
_NEWEST = 0.2


class DecodePlace:
    """Sizes the decode jobs and decides where each runs, from the decodes measured so far."""

    def __init__(self, model: LoadedModel, decode_threads: int) -> None:
        self._model = model
        self._threads = max(1, decode_threads)
        #: seconds one item takes to decode, a moving average (None: none decoded yet)
        self.item_s: float | None = None

    def job_items(self, startable: int, batch_limit: int) -> int:
        """How many items the next decode job takes: one until an item's decode time is
        known, then about `DECODE_JOB_S` worth, at most a batch's share of each thread and
        each thread's share of the `startable` items (an item slower than the average, a
        download, then still leaves no decode thread idle)."""
        if self.item_s is None:
            return 1
        most = max(1, min(batch_limit // self._threads, -(-startable // self._threads)))
        return max(1, min(most, int(DECODE_JOB_S / max(self.item_s, 1e-7))))

    def inline(self, items: list[TaskItem]) -> bool:
        """Whether a decode job of `items` runs on the event loop: measured to take less than
        `INLINE_DECODE_S` for that many, and none of them can wait on I/O to fetch."""
        return (self.item_s is not None and self.item_s * len(items) < INLINE_DECODE_S
                and not any(self._model.fetch_may_wait(item["name"], item.get("data"))
                            for item in items))

    def learn(self, took: Iterable[float]) -> None:
        """A decode job ended whose items took `took` seconds each (none: nothing learned)."""
        seconds = list(took)
        if not seconds:
            return
        mean = sum(seconds) / len(seconds)
        self.item_s = mean if self.item_s is None else (
            (1 - _NEWEST) * self.item_s + _NEWEST * mean)
