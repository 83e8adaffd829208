"""Issuing a job's tasks: cut from its input, placed on its pool's task topic, tracked.

With `issue_ahead_s` = 0 a job's tasks go out `tasks_per_round` per round, round robin over
the partitions (`placement`); otherwise as far as the workers have room (`pacing`). Each task
issued is tracked for its deadline (`deadlines`) where migration or pacing reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from inferstream.config import Config
from inferstream.controller.deadlines import Deadlines
from inferstream.controller.expansion import Item, JobExpansion
from inferstream.controller.ledger import JobState, LedgerCodec
from inferstream.controller.outbox import Outbox
from inferstream.controller.pacing import Pacing
from inferstream.controller.placement import task_partition
from inferstream.policy.view import ModelRange, PolicyView, model_range
from inferstream.schemas import Codec
from inferstream.schemas.records import Job, Task, new_task, now_ms

log = logging.getLogger(__name__)

#: A task to issue: (task id, its items, the partition of its pool's task topic).
Placed = tuple[int, list[Item], int]


def cursor(state: JobState) -> JobExpansion:
    """The job's cutting cursor, resumed after the tasks it has issued already."""
    if state.expansion is None:
        state.expansion = JobExpansion(state.job, skip_tasks=state.issued_tasks)
    return state.expansion


class TaskIssuer:
    """Cuts and places the tasks of accepted jobs into a round's outbox.

    `partitions(topic)` gives a topic's partition count."""

    def __init__(self, config: Config, codec: Codec, policy: PolicyView, deadlines: Deadlines,
                 pacing: Pacing, partitions: Callable[[str], int]) -> None:
        self.config = config
        self.options = config.controller
        self.codec = codec
        self.ledger = LedgerCodec(codec)
        self.policy = policy
        self.deadlines = deadlines
        self.pacing = pacing
        self.partitions = partitions

    def first(self, state: JobState, out: Outbox) -> None:
        """A job's first tasks, when it is accepted: all of them, or up to
        `tasks_per_round`, without pacing; with it, the first task whatever the workers
        hold (the rest follow in `more`)."""
        if self.options.issue_ahead_s <= 0:
            self._produce(state, self._round_robin(state), out)
            return
        self._produce(state, self._paced(state, force=True), out)
        self.pacing.begin()  # what it planned is outstanding now

    def more(self, waiting: list[JobState], out: Outbox) -> None:
        """More tasks of the `waiting` jobs (active, not fully issued): up to
        `tasks_per_round` per job; with pacing, as far as the workers have room (see
        `pacing`), one task per job in turn, so that a long job does not hold a later one
        back."""
        if self.options.issue_ahead_s <= 0:
            for state in waiting:
                self._produce(state, self._round_robin(state), out)
            return
        self.pacing.begin()
        placed: dict[str, list[Placed]] = {s.job_id: [] for s in waiting}
        turn = waiting
        while turn:
            again = []
            for state in turn:
                task = self._paced(state)
                placed[state.job_id].extend(task)
                if task and len(placed[state.job_id]) < self.options.tasks_per_round:
                    again.append(state)
            turn = again
        for state in waiting:
            if placed[state.job_id]:
                self._produce(state, placed[state.job_id], out)

    def _round_robin(self, state: JobState) -> list[Placed]:
        topic = self.config.task_topic(state.job["pool"])
        tasks = cursor(state).next_tasks(self.options.tasks_per_round)
        n = self.partitions(topic)
        within = self.model_range(state.job) if tasks else None
        return [(task_id, items, task_partition(state.job_id, task_id, n, within))
                for task_id, items in tasks]

    def _paced(self, state: JobState, *, force: bool = False) -> list[Placed]:
        """The job's next task and its partition, if a worker has room for it (`force`:
        even if none has)."""
        cut = cursor(state)
        if cut.finished:
            return []
        pool = state.job["pool"]
        partition = self.pacing.place(
            pool, state.job["model"], self.model_range(state.job),
            self.partitions(self.config.task_topic(pool)), state.job_id, cut.next_task_id,
            cut.next_size, force=force)
        if partition is None:
            return []
        return [(task_id, items, partition) for task_id, items in cut.next_tasks(1)]

    def _produce(self, state: JobState, tasks: list[Placed], out: Outbox) -> None:
        """The tasks, and the job's ledger entry that counts them, into the job's home
        partition's transaction."""
        topic = self.config.task_topic(state.job["pool"])
        now = now_ms()
        for task_id, items, partition in tasks:
            task = new_task(state.job, task_id, [i.as_record() for i in items],
                            home_partition=state.partition)
            encoded = self.codec.encode("Task", task)
            out.add(state.partition, topic, partition, state.job_id.encode(), encoded)
            self.track(task, encoded, state.partition, partition, now)
            state.issued_tasks += 1
            state.issued_items += len(items)
        out.count(state.partition, ("tasks_issued", state.job["pool"]), len(tasks))
        state.expanded = cursor(state).finished
        state.changed = True
        out.ledger(*self.ledger.job_entry(state), state.partition)

    def track(self, task: Task, encoded: bytes, home: int, partition: int, now: int) -> None:
        """Wait for `task` (issued on `partition` at `now` ms) where a deadline or the pace
        depends on it."""
        if self.options.migration_slack > 0 or self.options.issue_ahead_s > 0:
            self.deadlines.issued(task, encoded, home, partition, now)

    def model_range(self, job: Job) -> ModelRange | None:
        """The partitions of the job's model on its pool's topic; None: all of them."""
        try:
            return model_range(job["model"], self.policy.model_ranges(job["pool"]))
        except Exception as exc:  # a policy table that cannot answer: all partitions
            log.warning("no model range from the policy for pool %s: %r", job["pool"], exc)
            return None
