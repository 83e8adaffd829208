"""How a pool's capacity is shared among its running jobs: by priority, then by weight.

A job of a higher priority (`Job.priority`, `submit --priority`) has its tasks issued before
any lower one's while it has tasks to issue, and a worker that holds tasks of a higher
priority gets no task of a lower one (`ranks`, which pacing reads). Among the jobs of one
priority, items are issued in proportion to their weights (`Job.weight`): weighted fair
queueing by items, each job's tag growing by items / weight as its tasks are issued, the
lowest tag next (`FairShare`). A job that joins starts at the lowest tag of the jobs of its
pool and priority, so it shares from then on instead of catching up on what they had.

Tasks already queued on the workers cannot be reordered in Kafka, and a worker reads its
partitions in turn, so a later urgent job would wait behind up to `issue_ahead_s` of lower
work. `TakeBack` takes that work back: the queued tasks of lower-priority jobs on the
partitions the urgent job may use are superseded by a task control of their next attempt
(workers skip them, as they skip a migrated task's earlier attempt) and held here; they are
issued again, as that attempt, when their job's turn comes. A task that a worker had started
still answers (the first result of a task wins), and one that could not be moved again
afterwards (its next attempt would be its last) is left where it is. Each held task has an
ISSUED entry in the ledger (`ledger`), deleted when it goes out again, so that a replica
that takes the job over holds it too (`hold`) and issues it at the job's turn, where it
would otherwise wait out the deadline of a task on a worker's queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from inferstream.controller.deadlines import UNKNOWN_PARTITION, Deadlines
from inferstream.controller.ledger import JobState, LedgerCodec
from inferstream.controller.outbox import Outbox
from inferstream.controller.pacing import Ranks
from inferstream.schemas.records import LedgerStatus, Task, TaskControlReason

log = logging.getLogger(__name__)

def priority(state: JobState) -> int:
    return int(state.job["priority"])


@dataclass
class FairShare:
    """Each job's tag: the items issued to it over its weight, from when it joined."""

    _tags: dict[str, float] = field(default_factory=dict)

    def join(self, states: Iterable[JobState]) -> None:
        """Tags for the jobs of `states` that have none: the lowest of their peers' (the
        jobs of `states` of the same pool and priority), 0 where they have none."""
        states = list(states)
        for state in states:
            if state.job_id in self._tags:
                continue
            peers = [self._tags[s.job_id] for s in states if s.job_id in self._tags
                     and s.job["pool"] == state.job["pool"] and priority(s) == priority(state)]
            self._tags[state.job_id] = min(peers, default=0.0)

    def key(self, state: JobState) -> tuple[int, float]:
        """Which job goes first: the highest priority, then the lowest tag."""
        return -priority(state), self._tags.get(state.job_id, 0.0)

    def charge(self, state: JobState, items: int) -> None:
        self._tags[state.job_id] = self._tags.get(state.job_id, 0.0) + items / state.job[
            "weight"]

    def forget(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            self._tags.pop(job_id, None)


class TakeBack:
    """The queued tasks of lower-priority jobs taken back for a higher one, by job id.

    `usable(state)` gives the partitions of its pool's task topic that a job may be issued
    to now (pacing's)."""

    def __init__(self, deadlines: Deadlines, ledger: LedgerCodec, max_attempts: int,
                 usable: Callable[[JobState], set[int]]) -> None:
        self.deadlines = deadlines
        self.ledger = ledger
        self.max_attempts = max_attempts
        self.usable = usable
        self._held: dict[str, dict[int, Task]] = {}

    def ranks(self, jobs: Mapping[str, JobState]) -> Ranks:
        """The highest priority of the outstanding tasks each worker holds."""
        found: Ranks = {}
        for pool in {s.job["pool"] for s in jobs.values()}:
            for entry in self.deadlines.outstanding(pool):
                state = jobs.get(entry.task["job_id"])
                if state is None or entry.owner is None:
                    continue
                key = (pool, entry.owner)
                found[key] = max(found.get(key, priority(state)), priority(state))
        return found

    def take(self, waiting: list[JobState], jobs: Mapping[str, JobState], out: Outbox) -> None:
        """Take back the outstanding tasks of jobs below the highest priority of `waiting`
        (the jobs with tasks to issue) of each pool, on the partitions those may use."""
        tops: dict[str, list[JobState]] = {}
        for state in sorted(waiting, key=priority, reverse=True):
            top = tops.setdefault(state.job["pool"], [state])
            if state is not top[0] and priority(state) == priority(top[0]):
                top.append(state)
        for pool, top in tops.items():
            usable = set().union(*(self.usable(s) for s in top))
            for entry in self.deadlines.outstanding(pool):
                task = entry.task
                owner = jobs.get(task["job_id"])
                if (owner is None or priority(owner) >= priority(top[0])
                        or entry.partition == UNKNOWN_PARTITION or entry.partition not in usable
                        or task["attempt"] + 1 >= self.max_attempts):
                    continue
                self.deadlines.done(owner.job_id, task["task_id"])
                self._held.setdefault(owner.job_id, {})[task["task_id"]] = task
                out.control(entry.home, owner.job_id, task["task_id"], task["attempt"] + 1,
                            TaskControlReason.MIGRATED)
                owner.held[task["task_id"]] = task["attempt"] + 1
                out.ledger(*self.ledger.task_entry(
                    owner.job_id, task["task_id"], LedgerStatus.ISSUED,
                    attempt=task["attempt"] + 1), owner.partition)
                log.info("job %s task %d taken back from partition %d for job %s of "
                         "priority %d", owner.job_id, task["task_id"], entry.partition,
                         top[0].job_id, priority(top[0]))

    def hold(self, state: JobState, tasks: list[Task]) -> None:
        """Hold `tasks` of an adopted job, those its ledger shows taken back by an earlier
        owner (`JobState.held`), as the attempt before the one they go out as."""
        for task in tasks:
            attempt = max(1, state.held[task["task_id"]] - 1)
            self._held.setdefault(state.job_id, {})[task["task_id"]] = Task(
                **{**task, "attempt": attempt})

    def holds(self, job_id: str) -> bool:
        """Whether the job has tasks taken back, to issue again."""
        return bool(self._held.get(job_id))

    def next(self, state: JobState) -> Task | None:
        """The job's first task taken back that no result answered since (those that one
        did are dropped); None when none is left."""
        held = self._held.get(state.job_id, {})
        for task_id in sorted(held):
            if task_id not in state.done:
                return held[task_id]
            del held[task_id]
        self._held.pop(state.job_id, None)
        return None

    def issued(self, task: Task) -> None:
        """`task`, taken back, is placed to be issued again."""
        self._held.get(task["job_id"], {}).pop(task["task_id"], None)

    def released(self, state: JobState, task_id: int, out: Outbox) -> None:
        """The task goes out again: its ISSUED ledger entry is deleted."""
        if state.held.pop(task_id, None) is not None:
            out.ledger(*self.ledger.task_deletion(state.job_id, task_id), state.partition)

    def forget(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            self._held.pop(job_id, None)
