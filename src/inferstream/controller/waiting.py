"""Tasks of a model that no live worker serves yet, held until one does.

A worker that is starting is not in its pool's group yet: it announces itself
(`announcements`) while it loads and compiles its models. A task declined by every live worker
of its pool (`declines`), or adopted from an earlier owner of its job and late with no worker
known to serve its model, is not failed at once (`place`): it is held here while a worker of
its pool announces that it is starting with the model, or within `model_wait_s` of the moment
its job began to wait; each round the held tasks go again, as their next attempt, to a live
worker that may serve the model as soon as there is one. Only when none is starting and the
wait is over do their items fail with the reason, and a later decline of the job's tasks fails
at once unless a worker of the model is starting again. While a job waits, no more of its
tasks are issued (they would be declined too) and its PROGRESS events say what it waits for.
A job of a repository model whose version is not chosen yet (no live worker of the model was
known, see `versions`) holds its tasks the same way, and its version is chosen before the
first of them goes to a worker. A model here is a `model_ref` reference, with its version.
Held tasks live in this replica's memory: a replica that takes the job over tracks them as
outstanding (`deadlines`) and places them again once they are late.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from inferstream.config import Config
from inferstream.controller.declines import PoolView, model_words, target_of, unserved
from inferstream.controller.issuing import TaskIssuer
from inferstream.controller.ledger import JobState
from inferstream.controller.outbox import Outbox
from inferstream.controller.versions import JobVersions
from inferstream.schemas import Codec
from inferstream.schemas.records import LedgerStatus, Task, TaskControlReason, task_ref

log = logging.getLogger(__name__)

#: Starting workers named in a job's event; the rest are counted.
NAMED_WORKERS = 3


class Starting(Protocol):
    """Which workers are starting (`announcements.WorkerAnnouncements` follows them)."""

    def starting(self, pool: str, model: str, now_ms: int) -> list[str]:
        """The workers of `pool` starting with a model that serves `model`, at `now_ms`."""
        ...


class _NobodyStarting:
    def starting(self, pool: str, model: str, now_ms: int) -> list[str]:
        return []


#: For a controller that follows no announcements.
NOBODY_STARTING: Starting = _NobodyStarting()


@dataclass
class JobWait:
    """A job's tasks that no live worker of its pool may serve, held since `since_ms`."""

    pool: str
    model: str
    since_ms: int
    held: dict[int, Task] = field(default_factory=dict)
    #: what the job's events say it waits for
    reason: str | None = None
    #: the wait ended with its held tasks failed
    gave_up: bool = False


class ModelWaits:
    """The held tasks of the jobs this replica owns, by job id."""

    def __init__(self, config: Config, codec: Codec, pools: PoolView, starting: Starting,
                 issuer: TaskIssuer, partitions: Callable[[str], int],
                 versions: JobVersions) -> None:
        self.config = config
        self.codec = codec
        self.pools = pools
        self.starting = starting
        self.issuer = issuer
        self.versions = versions
        self.partitions = partitions
        self.wait_ms = config.controller.model_wait_s * 1000
        self._waits: dict[str, JobWait] = {}

    def place(self, state: JobState, task: Task, out: Outbox, now: int, *, why: str,
              kind: str) -> Task | None:
        """`task`, which its worker will not answer (it declined, or the task is late where
        it went), issued again on a live worker of its pool that may serve its model (the
        new attempt returned); held while none may but one may come; else its items failed."""
        versioned = self._versioned(state, task, out)
        partition = None if versioned is None else target_of(self.pools, self.config,
                                                              versioned, self.partitions)
        if versioned is not None and partition is not None:
            return self.issuer.again(state, versioned, partition, out, now, kind=kind, why=why)
        if self.hold(task, now):
            self.issuer.deadlines.done(state.job_id, task["task_id"])  # held here, late nowhere
        else:
            self._fail(state, task, out)
        return None

    def _fail(self, state: JobState, task: Task, out: Outbox) -> None:
        """Fail the items of `task`, which no live worker of its pool serves, as an attempt
        of its own, its next, as `migration` fails a task out of attempts: the attempt it
        was may still be on a task partition (one an earlier owner of the job issued), which
        a worker back later would run and commit, a second (job, task, attempt) on the
        results topic. Workers are told to skip it, and a decline of it read before the
        failure is superseded (`JobState.failed`). The task is late nowhere after it: found
        late out of attempts before its failure was read back (in the same round, say),
        `migration` failed it as that same attempt again, a second (job, task, attempt)."""
        self.issuer.deadlines.done(state.job_id, task["task_id"])
        failing = Task(**{**task, "attempt": task["attempt"] + 1})
        out.append(state.partition, unserved(self.pools, self.config, self.codec, failing,
                                             self.partitions))
        out.control(state.partition, task["job_id"], task["task_id"], failing["attempt"],
                    TaskControlReason.MIGRATED)
        state.failed[task["task_id"]] = failing["attempt"]

    def hold(self, task: Task, now: int) -> bool:
        """Hold `task`, which no live worker of its pool may serve, if its job may wait for
        one; False when it may not (its items are to fail now)."""
        wait = self._waits.get(task["job_id"])
        model = task_ref(task)
        if wait is None or wait.gave_up:
            starting = self.starting.starting(task["pool"], model, now)
            if not starting and (wait is not None or self.wait_ms <= 0):
                return False
            wait = self._waits[task["job_id"]] = JobWait(task["pool"], model, now)
        wait.held[task["task_id"]] = task
        log.info("job %s task %d held: no live worker of pool %r may serve %s",
                 task["job_id"], task["task_id"], task["pool"], model_words(model))
        return True

    def _versioned(self, state: JobState, task: Task, out: Outbox) -> Task | None:
        """`task` on its job's model version, chosen now where it was not yet (and written
        to the job's ledger entry before the task goes out); None while none can be."""
        chosen = state.model_version
        if not self.versions.choose(state):
            return None
        if chosen is None and state.model_version is not None:
            out.ledger(*self.issuer.ledger.job_entry(state), state.partition)
        if task["model_version"] == state.model_version:
            return task
        return Task(**{**task, "model_version": state.model_version})

    def holds(self, job_id: str, task_id: int) -> bool:
        """Whether the task is held (a decline of it is about an earlier attempt)."""
        wait = self._waits.get(job_id)
        return wait is not None and task_id in wait.held

    def waiting(self, job_id: str) -> bool:
        """Whether the job holds tasks (and so issues no more)."""
        wait = self._waits.get(job_id)
        return wait is not None and bool(wait.held)

    def reason(self, job_id: str) -> str | None:
        """What the job waits for, for its PROGRESS events; None: for nothing."""
        wait = self._waits.get(job_id)
        return wait.reason if wait is not None and wait.held else None

    def forget(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            self._waits.pop(job_id, None)

    def release(self, out: Outbox, now: int, jobs: Mapping[str, JobState]) -> None:
        """Each waiting job's held tasks issued again where a live worker may serve them
        now; failed with the reason when none is starting and the wait is over."""
        for job_id, wait in list(self._waits.items()):
            state = jobs.get(job_id)
            if state is None or state.status != LedgerStatus.ACTIVE:
                del self._waits[job_id]
            elif wait.held and self._issue(wait, state, out, now):
                del self._waits[job_id]  # served now: a later outage waits anew
                state.changed = True  # its next event says it waits no more
            elif wait.held:
                self._wait_or_fail(wait, state, out, now)

    def _issue(self, wait: JobWait, state: JobState, out: Outbox, now: int) -> bool:
        """Issue the held tasks that a live worker may serve now; whether none is left."""
        for task_id, task in sorted(wait.held.items()):
            if task_id in state.done:  # an earlier attempt answered it meanwhile
                del wait.held[task_id]
                continue
            versioned = self._versioned(state, task, out)
            if versioned is not None:  # the workers that loaded its version since
                self.versions.live(versioned["pool"], versioned["model"])
            partition = None if versioned is None else target_of(
                self.pools, self.config, versioned, self.partitions)
            if versioned is None or partition is None:
                return False
            del wait.held[task_id]
            self.issuer.again(state, versioned, partition, out, now, kind="declined",
                              why=f"held for {model_words(wait.model)} (no live worker "
                              "served it)")
        return True

    def _wait_or_fail(self, wait: JobWait, state: JobState, out: Outbox, now: int) -> None:
        starting = self.starting.starting(wait.pool, wait.model, now)
        if starting or now - wait.since_ms < self.wait_ms:
            reason = self._waiting_for(wait, starting)
            if reason != wait.reason:
                wait.reason, state.changed = reason, True
            return
        for task in wait.held.values():
            self._fail(state, task, out)
        wait.held.clear()
        wait.gave_up, wait.reason, state.changed = True, None, True

    def _waiting_for(self, wait: JobWait, starting: list[str]) -> str:
        model, pool = model_words(wait.model), wait.pool
        if starting:
            named = ", ".join(starting[:NAMED_WORKERS])
            more = len(starting) - NAMED_WORKERS
            who = f"{named} and {more} more" if more > 0 else named
            verb = "is" if len(starting) == 1 else "are"
            return (f"waiting for a worker of {model}: {who} of pool {pool!r} {verb} "
                    "starting with it")
        until = time.strftime("%H:%M:%S", time.gmtime((wait.since_ms + self.wait_ms) / 1000))
        return (f"waiting for a worker of {model}: no live worker of pool {pool!r} "
                f"serves it and none is starting; its tasks fail at {until} UTC unless one "
                "starts")
