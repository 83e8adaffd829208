"""Which partition of its pool's task topic each task of a job goes to, without pacing.

With `issue_ahead_s = 0`, and in `pacing` when no worker owns a partition the job may use."""

from __future__ import annotations

from inferstream.kafka.settings import partition_for
from inferstream.policy.view import ModelRange


def task_partition(job_id: str, task_id: int, partitions: int,
                   within: ModelRange | None = None) -> int:
    """Round-robin by task id from the job's own first partition (its id's hash), over the
    `partitions` of the topic or, given one, over the range of the job's model.

    Consecutive tasks go to consecutive partitions, so each partition gets a job's tasks
    within one of every other: a worker's share of the partitions is its share of the work.
    The first partition differs per job, so the short jobs' extra tasks do not all land on
    partition 0. A range that does not fit the topic (a topic with fewer partitions than
    the policy was planned for) is ignored.
    """
    if within is None or not within.fits(partitions):
        return (partition_for(job_id, partitions) + task_id) % partitions
    return within.first + (partition_for(job_id, within.count) + task_id) % within.count
