"""What every committer shares: the per-partition queue of tasks, in offset order, and the
rule that a partition's tasks commit in that order, results together with the offset.

`PartitionCommitter` holds the queue and the lock, and gathers the tasks that finish within a
short window into one commit (`CommitWindow`): the broker's cost is per transaction, not per
task. Its subclasses say how the records of one batch of finished tasks are committed with
their offset (`exactly_once.TransactionalCommitter`, `at_least_once.AtLeastOnceCommitter`).
A task carries the records it writes, rendered by the worker's source when its run is done;
what a committer asks of the group member that owns its partition comes through `Owner`. The
worker and `Ownership` see only this class.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from inferstream.kafka.clients import Outgoing, Record
from inferstream.kafka.errors import PartitionLostError
from inferstream.serving.pipeline import TaskRun

log = logging.getLogger(__name__)

#: A commit that takes longer than this has an unknown outcome.
COMMIT_TIMEOUT_S = 30.0
#: Half the wait before a failed commit is tried again; it doubles with each attempt.
RETRY_BACKOFF_S = 0.2


def retry_delay_s(attempt: int) -> float:
    """The wait after failed attempt `attempt` (1, 2, ...): 0.4 s, doubling, at most 5 s."""
    return min(RETRY_BACKOFF_S * 2.0**attempt, 5.0)


@dataclass
class PendingTask:
    """A record consumed from the partition, in offset order, with what it will write."""

    record: Record
    #: its run through the pipeline; None for a record answered at once
    run: TaskRun | None = None
    #: the records to write with its offset, once rendered (None: not yet)
    outgoing: list[Outgoing] | None = None
    #: when it was rendered (time.monotonic())
    ready_at: float = 0.0

    @property
    def offset(self) -> int:
        return self.record.offset

    @property
    def ready(self) -> bool:
        return self.outgoing is not None


@dataclass(frozen=True)
class CommitWindow:
    """How many finished tasks of a partition one transaction takes.

    A commit waits up to `wait_s` after its first task finished for the tasks behind it
    to finish too, and takes at most `max_tasks`; a failed transaction redoes all of them.
    The default (no wait, no cap) commits whatever is finished when the commit starts.
    """

    wait_s: float = 0.0
    max_tasks: int | None = None


#: Whatever is finished when a commit starts, in one transaction.
NO_WINDOW = CommitWindow()


class Owner(Protocol):
    """What a committer asks of the group member that owns its partition."""

    def owns(self, tp: Any) -> bool:
        """Whether the consumer group still assigns `tp` to this worker."""

    async def committed_offset(self, tp: Any) -> int | None:
        """The group's committed offset of `tp` as the broker has it now."""

    async def commit_offset(self, tp: Any, offset: int) -> None:
        """Commit `offset` for `tp` outside any transaction (at-least-once mode)."""

    def transaction_failed(self, tp: Any, fenced: bool) -> None:
        """A commit's transaction on `tp` failed: fenced, or aborted (for the metrics)."""


class PartitionCommitter(ABC):
    """Commits the finished tasks of one partition, in offset order, results with offsets."""

    def __init__(self, tp: Any, group_id: str, owner: Owner, max_attempts: int = 8,
                 window: CommitWindow = NO_WINDOW) -> None:
        self.tp = tp
        self.group_id = group_id
        self.owner = owner
        self.max_attempts = max_attempts
        self.window = window
        self._pending: deque[PendingTask] = deque()
        self._lock = asyncio.Lock()
        #: set whenever the queue changes in a way a commit's window waits for
        self._changed = asyncio.Event()
        self.lost = False

    @abstractmethod
    async def start(self) -> None:
        """Make the partition ours to commit (fencing any earlier owner where it can)."""

    @abstractmethod
    async def _commit(self, records: list[Outgoing], offset: int) -> None:
        """Write `records` and commit `offset` (the next one to read) with them;
        PartitionLostError when it cannot."""

    @abstractmethod
    async def _stop_producer(self) -> None:
        """Stop what `start` started."""

    def append(self, pending: PendingTask) -> None:
        self._pending.append(pending)

    def finish(self, pending: PendingTask, outgoing: list[Outgoing]) -> None:
        """`pending` is answered by `outgoing`: it may commit."""
        pending.outgoing = outgoing
        pending.ready_at = time.monotonic()
        self._changed.set()

    @property
    def has_ready(self) -> bool:
        """The task at the head of the queue is finished: a commit has work."""
        return not self.lost and bool(self._pending) and self._pending[0].ready

    @property
    def busy(self) -> bool:
        """Tasks wait to be committed, or a commit is under way."""
        return not self.lost and (bool(self._pending) or self._lock.locked())

    async def commit_ready(self) -> list[PendingTask]:
        """Commit the finished tasks at the head of the queue in one go, as the window says;
        returns them (in offset order). Tasks left ready past the cap need another call.
        PartitionLostError where they could not be: the partition is given up (whatever
        the error), so that no later commit passes them over; they are redone from the
        committed offset."""
        async with self._lock:
            await self._gather()
            ready: list[PendingTask] = []
            while (self._pending and self._pending[0].ready and not self.lost
                   and len(ready) != self.window.max_tasks):
                ready.append(self._pending.popleft())
            if ready:
                records = [record for task in ready for record in task.outgoing or ()]
                try:
                    await self._commit(records, ready[-1].offset + 1)
                except PartitionLostError:
                    raise
                except Exception as exc:  # (a TLS file being rotated as a producer starts)
                    self._mark_lost()
                    raise PartitionLostError(f"{self.tp}: commit failed: {exc!r}") from exc
            return ready

    def _ready_at_head(self) -> int:
        """The finished tasks at the head of the queue, counted up to the cap."""
        count = 0
        for task in self._pending:
            if not task.ready or count == self.window.max_tasks:
                break
            count += 1
        return count

    async def _gather(self) -> None:
        """Wait while tasks behind the finished head are under way, until the cap is met or
        `window.wait_s` has passed since the head finished (a task waits that long at most)."""
        if self.window.wait_s <= 0 or not self.has_ready:
            return
        deadline = self._pending[0].ready_at + self.window.wait_s
        while not self.lost:
            ready = self._ready_at_head()
            left = deadline - time.monotonic()
            if not 0 < ready < len(self._pending) or ready == self.window.max_tasks or left <= 0:
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return

    def shed_unstarted(self) -> int:
        """Leave the tasks from the first one not under way yet to the partition's next owner:
        drop them from the queue and cancel them. Those before it commit as usual, so a
        revoked partition waits for the batches under way, not for its whole queue (a slow
        worker's window took 8.7 s); the next owner reads the rest from the committed offset.
        Returns how many were dropped."""
        cut = next((i for i, task in enumerate(self._pending)
                    if task.run is not None and not task.run.started and not task.run.done),
                   len(self._pending))
        shed = len(self._pending) - cut
        for _ in range(shed):
            task = self._pending.pop()
            if task.run is not None:
                task.run.cancel()
        self._changed.set()
        return shed

    def _mark_lost(self) -> None:
        self.lost = True
        for task in self._pending:
            if task.run is not None:
                task.run.cancel()
        self._pending.clear()
        self._changed.set()

    async def close(self, wait_s: float = 10.0) -> None:
        """Drop what is not committed (the next owner redoes it) and stop the producer,
        after the commit under way, if any, ends (up to `wait_s`)."""
        self._mark_lost()
        try:
            await asyncio.wait_for(self._lock.acquire(), wait_s)
        except TimeoutError:
            log.warning("closing tp=%s while a commit is still under way", self.tp)
            await self._stop_producer()
            return
        try:
            await self._stop_producer()
        finally:
            self._lock.release()
