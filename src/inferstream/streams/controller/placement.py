"""Which partition of its pool's task topic each task of a job goes to."""

from __future__ import annotations

from inferstream.streams.kafka.settings import partition_for


def task_partition(job_id: str, task_id: int, partitions: int) -> int:
    """Round-robin by task id from the job's own first partition (its id's hash).

    Consecutive tasks go to consecutive partitions, so each partition gets a job's tasks
    within one of every other: a worker's share of the partitions is its share of the work.
    The first partition differs per job, so the short jobs' extra tasks do not all land on
    partition 0.
    """
    return (partition_for(job_id, partitions) + task_id) % partitions
