"""Issuing a job's tasks as its workers get through them, each where it would be done first.

With `issue_ahead_s` > 0 the controller does not put a job's tasks on the task topic all at
once. It keeps each live worker of the pool about `issue_ahead_s` of work ahead: the items of
this controller's outstanding tasks on the partitions the worker owns, at the worker's seconds
per item of the job's model (`Deadlines.target_per_item_s`: the policy's rate of the model on
the worker, or its results). Each new task
goes to the worker that would finish it first, among those below their
`issue_ahead_s`, on the least loaded of its partitions (within the model's range, where the
policy gives the pool ranges), except that tasks the worker does in less than
`LINE_UP_BELOW_S` (50 ms) line up on the one of its partitions that holds the most of this
controller's outstanding tasks: the tasks it finishes together then commit together, in one
transaction (up to the worker's `commit_max_tasks`), instead of one transaction each on as
many partitions (for tasks of milliseconds, half the broker's CPU an item; BENCHMARKS.md).
A worker with no known speed holds `UNKNOWN_SPEED_TASKS` (two)
tasks at a time until its first results say how fast it is: one to work on and one behind it,
so that it does not stand idle while its first result travels to the controller and the
tasks that result lets it have travel back (a commit each way, and under the load of a whole
pool finishing its first tasks at once, seconds).

So a faster worker is sent more tasks, in proportion to its speed, whatever share of the
partitions it owns, and the last tasks of a job end on every worker at about the same time.
A worker that dies, or slows down, holds at most `issue_ahead_s` of the job: that is what the
worker that takes its partitions over inherits, not a full share of the whole job. Nor more
than `AHEAD_LARGEST_TASKS` of the largest tasks (`ahead_items`), where a model's speed makes
`issue_ahead_s` of it larger than that.

A task of a job goes to no worker that holds tasks of a job of a higher priority (`ranks`,
from `sharing`): strictly by priority, worker by worker.

When no worker that may serve the model owns a partition (none has joined yet, or the group
cannot be described right now), each partition of the range is given one task at a time.
Several controller replicas each keep the workers `issue_ahead_s` ahead with their own jobs'
tasks; a replica that takes a job over does not count the tasks its predecessor issued.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inferstream.controller.deadlines import Deadlines
from inferstream.controller.declines import PoolView
from inferstream.controller.placement import task_partition
from inferstream.policy.view import ModelRange, PolicyView

#: tasks a worker of unknown speed holds at a time (see the module's docstring)
UNKNOWN_SPEED_TASKS = 2
#: A worker's tasks expected to take less than this each line up on one of its partitions, so
#: those it finishes within one commit of each other share a transaction (a worker's commit
#: takes some 10-25 ms here: 20-25 tasks of 16 sim:ms=0 items ended while one ran, BENCHMARKS
#: "Several tasks in one transaction"). Longer tasks end a commit or more apart, so lining
#: them up gains nothing; they are spread over the worker's partitions, and a rebalance that
#: takes some of a slowed worker's partitions takes part of its backlog with them.
LINE_UP_BELOW_S = 0.05

#: A worker is kept at most this many of the largest tasks (`max_chunk_size` items each) ahead,
#: whatever its speed says: one to work on and one behind it, as a worker of unknown speed.
#: A calibration and the results' times are model time per item, which leaves out the
#: worker's own work on each item (the policy's rate, once the worker has been backlogged,
#: does not; before 2026-12-06 it did too): for a model of next to no compute (sim:ms=0's
#: forward pass alone, 234,297 items a second) `issue_ahead_s` of it was a whole job of 1.28
#: million items at once, all of it outstanding in the controller (758 MiB) and the worker,
#: and the deadlines made of that speed (`migration_floor_s`, 20 s, in effect) passed for the
#: tasks at the back.
AHEAD_LARGEST_TASKS = 2

#: (pool, worker) -> the highest priority among the tasks of this replica's jobs it holds
Ranks = dict[tuple[str, str], int]


@dataclass(frozen=True)
class _Worker:
    name: str
    #: the task partitions it owns that the job may use
    parts: list[int]
    #: seconds per item (None: not known yet)
    per_item_s: float | None


@dataclass
class Pacing:
    """Where the next task of a job goes, or None when every worker is far enough ahead.

    `begin()` starts a round: the workers, their partitions and speeds are read once per
    round, and tasks placed since are counted as planned until the caller issues them (and
    `Deadlines.issued` counts them as outstanding); `ranks`, the priorities the workers hold
    this round."""

    table: Deadlines
    pools: PoolView
    policy: PolicyView
    ahead_s: float
    #: the most items of a worker's outstanding tasks of this replica, the new one counted
    #: (one task at least; None: no bound but `ahead_s`)
    ahead_items: int | None = None
    _planned: dict[tuple[str, int], int] = field(default_factory=dict)
    _workers: dict[tuple[str, str, ModelRange | None, int], list[_Worker]] = field(
        default_factory=dict)
    _ranks: Ranks = field(default_factory=dict)

    def begin(self, ranks: Ranks | None = None) -> None:
        self._planned.clear()
        self._workers.clear()
        self._ranks = ranks or {}

    def place(self, pool: str, model: str, within: ModelRange | None, partitions: int,
              job_id: str, task_id: int, items: int, *, force: bool = False,
              priority: int | None = None) -> int | None:
        """The partition for task `task_id` (of `items` items) of a job of `model` on
        `pool`'s topic of `partitions`, or None when no worker has room for it now; with
        `force`, a partition even then (a job's first task). A job's `priority` keeps it
        off the workers that hold tasks of a higher one (None: off none)."""
        if within is not None and not within.fits(partitions):
            within = None  # the range does not fit the topic: all partitions
        workers = self._eligible(pool, model, within, partitions)
        if workers and priority is not None and not force:
            workers = [w for w in workers
                       if self._ranks.get((pool, w.name), priority) <= priority]
            if not workers:
                return None
        if workers:
            partition = self._on_worker(pool, workers, items, force)
        else:
            partition = self._on_partition(pool, within, partitions, job_id, task_id, force)
        if partition is not None:
            key = (pool, partition)
            self._planned[key] = self._planned.get(key, 0) + items
        if partition is not None and priority is not None:
            for worker in workers:  # it holds this priority now, for the round's later tasks
                if partition in worker.parts:
                    rank = (pool, worker.name)
                    self._ranks[rank] = max(self._ranks.get(rank, priority), priority)
        return partition

    def usable(self, pool: str, model: str, within: ModelRange | None,
               partitions: int) -> set[int]:
        """The partitions a job of `model` may be issued to: its live workers' (within its
        range), or every partition of the range when none is known."""
        if within is not None and not within.fits(partitions):
            within = None
        workers = self._eligible(pool, model, within, partitions)
        if workers:
            return {p for w in workers for p in w.parts}
        return {p for p in range(partitions) if within is None or p in within}

    def _queued(self, pool: str, partition: int) -> int:
        return self.table.queued(pool, partition) + self._planned.get((pool, partition), 0)

    def _eligible(self, pool: str, model: str, within: ModelRange | None,
                  partitions: int) -> list[_Worker]:
        """The live workers that may serve `model` (healthy, never declined it), with their
        partitions in its range and their speeds; read once per round."""
        key = (pool, model, within, partitions)
        known = self._workers.get(key)
        if known is not None:
            return known
        members = self.table.members(pool) or {}
        policy = self.policy.workers(pool) or {}
        found = []
        for worker, owned in sorted(members.items()):
            entry = policy.get(worker)
            if entry is not None and not entry.healthy:
                continue
            if model in self.pools.declined.get(worker, set()):
                continue
            parts = [p for p in owned if p < partitions and (within is None or p in within)]
            if parts:
                found.append(_Worker(worker, parts,
                                     self.table.target_per_item_s(pool, worker, model, policy)))
        self._workers[key] = found
        return found

    def _on_worker(self, pool: str, workers: list[_Worker], items: int,
                   force: bool) -> int | None:
        best: tuple[float, int, int] | None = None  # (finish s, queued items, partition)
        for worker in workers:
            queued = sum(self._queued(pool, p) for p in worker.parts)
            per_item = worker.per_item_s
            if per_item is None or per_item <= 0:  # speed unknown: a few tasks at a time
                room, finish = queued < UNKNOWN_SPEED_TASKS * items, 0.0
            else:
                room = queued * per_item < self.ahead_s and (
                    self.ahead_items is None or queued == 0
                    or queued + items <= self.ahead_items)
                finish = (queued + items) * per_item
            if not room and not force:
                continue
            candidate = (finish, queued, self._partition_of(pool, worker, items))
            if best is None or candidate < best:
                best = candidate
        return None if best is None else best[2]

    def _partition_of(self, pool: str, worker: _Worker, items: int) -> int:
        """The partition of `worker` for a task of `items`: for tasks shorter than
        `LINE_UP_BELOW_S` the one that holds the most of its outstanding tasks (the lowest at
        first), else the one that holds the fewest."""
        per_item = worker.per_item_s
        if per_item is not None and 0 < items * per_item < LINE_UP_BELOW_S:
            return max(worker.parts, key=lambda p: (self._queued(pool, p), -p))
        return min(worker.parts, key=lambda p: (self._queued(pool, p), p))

    def _on_partition(self, pool: str, within: ModelRange | None, partitions: int,
                      job_id: str, task_id: int, force: bool) -> int | None:
        """No worker to pace by: the job's next partitions in round-robin order that hold
        none of this controller's tasks."""
        span = within.count if within is not None else partitions
        for step in range(span):
            partition = task_partition(job_id, task_id + step, partitions, within)
            if self._queued(pool, partition) == 0:
                return partition
        return task_partition(job_id, task_id, partitions, within) if force else None

