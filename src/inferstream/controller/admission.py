"""Whether the controller accepts a job, and the reason it rejects one.

Any producer may write to the jobs topic, not only inferstream's `Client`, so the controller
checks every job record again: its options (`check_job_options`, which the Client also
applies before sending), its model name and version (well-formed: which names a repository
holds only a worker can tell), its pool's task topic, and the inputs that only the
controller's host can read (directories and `@LIST` files).
"""

from __future__ import annotations

from collections.abc import Callable

from inferstream.controller.expansion import check_inputs
from inferstream.jobs.errors import InputError, InvalidJobError
from inferstream.jobs.options import check_job_options
from inferstream.kafka.errors import KafkaSetupError
from inferstream.models import UnknownModelError, check_model_name
from inferstream.schemas.records import Job, model_ref


def rejection_reason(job: Job, task_partitions: Callable[[str], int], task_topic: str
                     ) -> str | None:
    """Why `job` cannot run, or None; `task_partitions(task_topic)` raises KafkaSetupError
    when the job's pool has no task topic."""
    try:
        check_job_options(job["chunk_size"] or None, job["top_k"], job["weight"])
        name, _ = check_model_name(model_ref(job["model"], job["model_version"]))
        if name != job["model"]:
            return (f"model {job['model']!r}: a job gives its model's version in "
                    "model_version, not in its name")
        check_inputs(job)
        task_partitions(task_topic)
    except (InvalidJobError, UnknownModelError, InputError) as exc:
        return str(exc)
    except KafkaSetupError as exc:
        return f"unknown pool {job['pool']!r}: {exc}"
    if not job["inputs"] and not job["inline_items"]:
        return "empty input: the job names no items"
    return None
