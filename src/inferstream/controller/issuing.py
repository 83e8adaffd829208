"""Issuing a job's tasks: cut from its input, placed on its pool's task topic, tracked.

With `issue_ahead_s` = 0 a job's tasks go out `tasks_per_round` per round, round robin over
the partitions (`placement`); otherwise as far as the workers have room (`pacing`), the jobs
sharing that room by priority and weight, lower-priority tasks queued on the workers taken
back for a higher-priority job (`sharing`). Each task
issued is tracked for its deadline (`deadlines`) where migration or pacing reads it, and so is
each task that an earlier owner of an adopted job issued and no result answered yet.

A task issued again (declined, held for its model, late) gets the next attempt; the highest
attempt of a job's tasks is in its ledger entry, written in the same transaction as the task
that reached it, so that a replica that takes the job over issues above every earlier attempt.
"""

from __future__ import annotations

import heapq
import logging
from collections import Counter
from collections.abc import Callable, Mapping

from inferstream.config import Config
from inferstream.controller.deadlines import Deadlines
from inferstream.controller.expansion import Item, JobExpansion
from inferstream.controller.ledger import JobState, LedgerCodec
from inferstream.controller.outbox import Outbox
from inferstream.controller.pacing import Pacing
from inferstream.controller.placement import task_partition
from inferstream.controller.sharing import FairShare, TakeBack, priority
from inferstream.policy.view import ModelRange, PolicyView, model_range
from inferstream.schemas import Codec, SchemaError
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

    `partitions(topic)` gives a topic's partition count; `grown(topic, count)` is told that
    a worker owns partition `count - 1` of a task topic that the count says has fewer."""

    def __init__(self, config: Config, codec: Codec, policy: PolicyView, deadlines: Deadlines,
                 pacing: Pacing, partitions: Callable[[str], int],
                 grown: Callable[[str, int], None] = lambda topic, count: None) -> None:
        self.config = config
        self.options = config.controller
        self.codec = codec
        self.ledger = LedgerCodec(codec)
        self.policy = policy
        self.deadlines = deadlines
        self.pacing = pacing
        self.partitions = partitions
        self.grown = grown
        self.share = FairShare()
        self.taken = TakeBack(deadlines, self.ledger, self.options.max_attempts, self._usable)

    def first(self, state: JobState, out: Outbox) -> None:
        """A job's first tasks, when it is accepted: all of them, or up to
        `tasks_per_round`, without pacing; with it, the first task whatever the workers
        hold (the rest follow in `more`)."""
        if self.options.issue_ahead_s <= 0:
            self._produce(state, self._round_robin(state), out)
            return
        self._produce(state, self._paced(state, force=True, rank=priority(state)), out)
        self.pacing.begin()  # what it planned is outstanding now

    def more(self, waiting: list[JobState], jobs: Mapping[str, JobState], out: Outbox,
             now: int) -> None:
        """More tasks of the `waiting` jobs (active, with tasks to issue) of `jobs` (all this
        replica's), at `now` (ms): up to `tasks_per_round` per job; with pacing, as far as
        the workers have room (see `pacing`), a task at a time to the job of the highest
        priority and then the fewest items issued for its weight (see `sharing`), so that a
        long job does not hold a later one back; a job's tasks taken back go first."""
        self.share.join(waiting)
        if self.options.issue_ahead_s <= 0:
            for state in sorted(waiting, key=self.share.key):
                self._produce(state, self._round_robin(state), out)
            return
        self._see_growth({state.job["pool"] for state in waiting})
        self.pacing.begin(self.taken.ranks(jobs))
        self.taken.take(waiting, jobs, out)
        placed: dict[str, list[Placed]] = {s.job_id: [] for s in waiting}
        again: list[tuple[JobState, Task, int]] = []
        self._share_room(waiting, placed, again)
        for state, task, partition in again:
            self.taken.released(state, task["task_id"], out)
            self.again(state, task, partition, out, now, kind="preempted",
                       why="taken back for a job of a higher priority")
        for state in waiting:
            if placed[state.job_id]:
                self._produce(state, placed[state.job_id], out)

    def _see_growth(self, pools: set[str]) -> None:
        """Partitions added to a pool's task topic while the controller runs: its workers
        own them once their group rebalances; placing by the old count left the workers
        that own only new ones idle until the controller restarted."""
        for pool in sorted(pools):
            owned = self.deadlines.members(pool) or {}
            highest = max((p for parts in owned.values() for p in parts), default=-1)
            topic = self.config.task_topic(pool)
            if highest >= self.partitions(topic):
                self.grown(topic, highest + 1)

    def _share_room(self, waiting: list[JobState], placed: dict[str, list[Placed]],
                    again: list[tuple[JobState, Task, int]]) -> None:
        """Place the `waiting` jobs' tasks one at a time, each to the job that goes first
        (`FairShare.key`), until none has room or its `tasks_per_round`."""
        turns = [(self.share.key(s), n, s) for n, s in enumerate(waiting)]
        heapq.heapify(turns)
        issued: Counter[str] = Counter()
        while turns:
            _, n, state = turns[0]
            items = self._next(state, placed[state.job_id], again)
            if items:
                issued[state.job_id] += 1
                self.share.charge(state, items)
            if not items or issued[state.job_id] >= self.options.tasks_per_round:
                heapq.heappop(turns)
            else:
                heapq.heapreplace(turns, (self.share.key(state), n, state))

    def _next(self, state: JobState, placed: list[Placed],
              again: list[tuple[JobState, Task, int]]) -> int:
        """Place the job's next task, one taken back first, into `placed` or `again`; its
        items, 0 where no worker has room for it."""
        held = self.taken.next(state)
        if held is None:
            task = self._paced(state, rank=priority(state))
            placed.extend(task)
            return sum(len(items) for _, items, _ in task)
        pool = state.job["pool"]
        partition = self.pacing.place(
            pool, state.model, self.model_range(state.job),
            self.partitions(self.config.task_topic(pool)), state.job_id, held["task_id"],
            len(held["items"]), priority=priority(state))
        if partition is None:
            return 0
        self.taken.issued(held)
        again.append((state, held, partition))
        return len(held["items"])

    def forget(self, job_ids: list[str]) -> None:
        """Drop what the issuer keeps of these jobs (finished, or no longer owned)."""
        self.share.forget(job_ids)
        self.taken.forget(job_ids)

    def _usable(self, state: JobState) -> set[int]:
        pool = state.job["pool"]
        return self.pacing.usable(pool, state.model, self.model_range(state.job),
                                  self.partitions(self.config.task_topic(pool)))

    def _round_robin(self, state: JobState) -> list[Placed]:
        topic = self.config.task_topic(state.job["pool"])
        tasks = cursor(state).next_tasks(self.options.tasks_per_round)
        n = self.partitions(topic)
        within = self.model_range(state.job) if tasks else None
        return [(task_id, items, task_partition(state.job_id, task_id, n, within))
                for task_id, items in tasks]

    def _paced(self, state: JobState, *, force: bool = False,
               rank: int | None = None) -> list[Placed]:
        """The job's next task and its partition, if a worker has room for it (`force`:
        even if none has); `rank`: the job's priority, to keep it off the workers that
        hold tasks of a higher one."""
        cut = cursor(state)
        if cut.finished:
            return []
        pool = state.job["pool"]
        partition = self.pacing.place(
            pool, state.model, self.model_range(state.job),
            self.partitions(self.config.task_topic(pool)), state.job_id, cut.next_task_id,
            cut.next_size, force=force, priority=rank)
        if partition is None:
            return []
        return [(task_id, items, partition) for task_id, items in cut.next_tasks(1)]

    def _produce(self, state: JobState, tasks: list[Placed], out: Outbox) -> None:
        """The tasks, and the job's ledger entry that counts them, into the job's home
        partition's transaction; none where one of them cannot be encoded (the job's
        `failure` says why)."""
        topic = self.config.task_topic(state.job["pool"])
        now = now_ms()
        built = [(self._task(state, task_id, items), partition)
                 for task_id, items, partition in tasks]
        try:
            encoded = [self.codec.encode("Task", task) for task, _ in built]
        except SchemaError as exc:  # the job fails (`book`), not the controller
            state.failure = f"its tasks cannot be written: {exc}"
            log.warning("job %s: %s", state.job_id, state.failure)
            return
        for (task, partition), value in zip(built, encoded, strict=True):
            out.add(state.partition, topic, partition, state.job_id.encode(), value)
            self.track(task, state.partition, partition, now)
        out.count(state.partition, ("tasks_issued", state.job["pool"]), len(tasks))
        self._counted(state, [items for _, items, _ in tasks], out)

    def unplaced(self, state: JobState, out: Outbox) -> list[Task]:
        """The job's next tasks (up to `tasks_per_round`), counted as issued, for the caller
        to place: a job whose model's version is not chosen yet (`versions`) holds them
        until a worker of the model is there (`waiting`)."""
        cut = cursor(state).next_tasks(self.options.tasks_per_round)
        tasks = [self._task(state, task_id, items) for task_id, items in cut]
        self._counted(state, [items for _, items in cut], out)
        return tasks

    def _task(self, state: JobState, task_id: int, items: list[Item]) -> Task:
        return new_task(state.job, task_id, [i.as_record() for i in items],
                        home_partition=state.partition, model_version=state.model_version)

    def _counted(self, state: JobState, tasks: list[list[Item]], out: Outbox) -> None:
        """Tasks of `tasks`' items counted as issued, in the job's ledger entry."""
        state.issued_tasks += len(tasks)
        state.issued_items += sum(len(items) for items in tasks)
        cut = cursor(state)
        state.expanded = cut.finished and cut.error is None  # an error fails it (`book`)
        state.changed = True
        out.ledger(*self.ledger.job_entry(state), state.partition)

    def track(self, task: Task, home: int, partition: int, now: int) -> None:
        """Wait for `task` (issued on `partition` at `now` ms) where a deadline or the pace
        depends on it."""
        if self.options.migration_slack > 0 or self.options.issue_ahead_s > 0:
            self.deadlines.issued(task, home, partition, now)

    def again(self, state: JobState, task: Task, partition: int, out: Outbox, now: int, *,
              why: str, kind: str) -> Task:
        """`task` issued again as its next attempt on `partition` at `now` (ms) and tracked,
        `why` logged and counted as `kind` (declined, migrated); the job's ledger entry too
        where that attempt is the job's highest yet."""
        again = Task(**{**task, "attempt": task["attempt"] + 1, "issued_at": now})
        out.add(state.partition, self.config.task_topic(task["pool"]), partition,
                task["job_id"].encode(), self.codec.encode("Task", again))
        self.track(again, state.partition, partition, now)
        out.count(state.partition, ("tasks_reissued", task["pool"], kind))
        if state.max_attempt and again["attempt"] > state.max_attempt:  # 0: not recorded
            state.max_attempt = again["attempt"]
            out.ledger(*self.ledger.job_entry(state), state.partition)
        log.info("job %s task %d %s: re-issued as attempt %d on partition %d", task["job_id"],
                 task["task_id"], why, again["attempt"], partition)
        return again

    def adopt(self, state: JobState, now: int) -> None:
        """Wait for the tasks an earlier owner of the adopted job issued that no result has
        answered: their items cut again from the job's input (in its fixed order), as the
        job's highest recorded attempt, with deadlines from the pool's speed; those it had
        taken back (`JobState.held`) are held again, to go out at the job's turn. A job
        whose ledger recorded no attempt (a controller before it) is left as it was."""
        outstanding = set(range(state.issued_tasks)) - state.done
        if not outstanding or state.max_attempt < 1 or (
                self.options.migration_slack <= 0 and not state.held):
            return
        # an expanded job needs no cursor: the walk stops after its last outstanding task
        skip = max(outstanding) + 1 if state.expanded else state.issued_tasks
        try:
            cut = JobExpansion(state.job, skip_tasks=skip, keep=outstanding)
        except OSError as exc:  # its list file is gone: the next round's cursor says so
            log.warning("job %s: its earlier tasks get no deadline: %s", state.job_id, exc)
            return
        if not state.expanded:
            state.expansion = cut
        tasks = [new_task(state.job, task_id, [item.as_record() for item in items],
                          attempt=state.max_attempt, home_partition=state.partition,
                          model_version=state.model_version)
                 for task_id, items in sorted(cut.kept.items())]
        cut.kept.clear()
        self.taken.hold(state, [t for t in tasks if t["task_id"] in state.held])
        queued = [t for t in tasks if t["task_id"] not in state.held]
        if self.options.migration_slack > 0:
            self.deadlines.adopted(queued, state.partition, now)
        log.info("job %s: %d tasks issued by an earlier owner are waited for, deadlines from "
                 "the pool's speed; %d it had taken back are held to issue again",
                 state.job_id, len(queued), len(tasks) - len(queued))

    def model_range(self, job: Job) -> ModelRange | None:
        """The partitions of the job's model on its pool's topic; None: all of them."""
        try:
            return model_range(job["model"], self.policy.model_ranges(job["pool"]))
        except Exception as exc:  # a policy table that cannot answer: all partitions
            log.warning("no model range from the policy for pool %s: %r", job["pool"], exc)
            return None
