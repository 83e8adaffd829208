"""How many items each task of a job holds: the job's `--chunk-size` if it gave one, else the
policy's task size for its model on its pool (about `task_seconds` of work on the pool's
median worker for that model, or for any model where the policy has no figure of the job's),
else the controller's `default_chunk_size`; whichever it is, at most the controller's
`max_chunk_size` (a policy measuring a model of no compute would otherwise cut a job into a
few tasks of 100,000s of items: members left idle, and results too large for a record).
Whatever the size, `expansion.cut_tasks` closes a task early where its inline bytes reach the
message-size cap.

The size is chosen once, when the job is accepted, and written into the job as the ledger
keeps it, so a replica that takes the job over cuts the rest of it the same way even when
the policy has changed since.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from inferstream.policy.view import PolicyView
from inferstream.schemas.records import Job, model_ref

log = logging.getLogger(__name__)

class SizeSource(StrEnum):
    JOB = "job"
    POLICY = "policy"
    DEFAULT = "default"


@dataclass(frozen=True)
class TaskSize:
    """Items per task of one job, where that number came from, and whether `max_chunk_size`
    cut it down."""

    items: int
    source: SizeSource
    capped: bool = False

    def __str__(self) -> str:
        return f"{self.source}, capped by max_chunk_size" if self.capped else self.source


def choose_task_size(job: Job, policy: PolicyView, default: int, most: int) -> TaskSize:
    """The job's own chunk size when it gave one (0 is "not given"; a negative one is left
    for admission to reject), else the policy's for its model (its pinned version, else
    the newest the policy measured) on its pool, else `default`; at most `most`."""
    size = _uncapped(job, policy, default)
    if size.items > most:
        return TaskSize(most, size.source, capped=True)
    return size


def _uncapped(job: Job, policy: PolicyView, default: int) -> TaskSize:
    if job["chunk_size"] != 0:
        return TaskSize(job["chunk_size"], SizeSource.JOB)
    model = model_ref(job["model"], job["model_version"])
    recommended = _recommended(policy, job["pool"], model)
    if recommended is not None:
        return TaskSize(recommended, SizeSource.POLICY)
    return TaskSize(default, SizeSource.DEFAULT)


def _recommended(policy: PolicyView, pool: str, model: str) -> int | None:
    try:
        size = policy.task_size(pool, model)
    except Exception as exc:  # a policy table that cannot answer: size the job without it
        log.warning("no task size from the policy for pool %s: %r", pool, exc)
        return None
    return size if size is not None and size >= 1 else None


def sized(job: Job, size: TaskSize) -> Job:
    """`job` with its chunk size set to the chosen one (what the ledger keeps)."""
    return Job(**{**job, "chunk_size": size.items})
