"""What a user asks for and hears back: a Job, the Tasks it is cut into, its JobEvents.

A task names its model and, for a repository model, the version its job runs on; `serves`
says which models answer it, each model and version written as one reference (`model_ref`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypedDict

from inferstream.schemas.records.clock import now_ms

#: Simulated models: `sim:ms=N,...`, whose parameters describe a node's speed, not a model
#: (apart from `embedding=D`: the output, vectors of D floats instead of top-k).
SIM_PREFIX = "sim:"
#: The names of simulated models (parsed by `models.names.parse_sim_name`).
SIM_SYNTAX = ("sim:ms=N[,jitter=F][,slow_after=K,slow_factor=X] (as=alexnet or as=googlenet "
              "instead of ms; batch_ms=B, slower=S; embedding=D: vectors of D floats; decode_ms=M: "
              "each item's decode sleeps M ms)")


def model_ref(model: str, version: int | None) -> str:
    """A model and its version as one reference: `NAME:VERSION`, or the name alone."""
    return model if version is None else f"{model}:{version}"


def split_ref(ref: str) -> tuple[str, int | None]:
    """The model name and version of a `model_ref` reference (None: no version)."""
    name, sep, version = ref.rpartition(":")
    if sep and version.isascii() and version.isdigit() and not ref.startswith(SIM_PREFIX):
        return name, int(version)
    return ref, None


def task_ref(task: Task) -> str:
    """The model and version a task asks for, as one reference."""
    return model_ref(task["model"], task["model_version"])


def serves(model: str, task_model: str) -> bool:
    """Whether a result of `model` answers a Task asking for `task_model`, each a `model_ref`
    reference: the same name, and the same version where both name one (a reference without
    one stands for any version); or any simulated model for a simulated task that asks for
    the same output."""
    if model.startswith(SIM_PREFIX) or task_model.startswith(SIM_PREFIX):
        return model == task_model or (
            model.startswith(SIM_PREFIX) and task_model.startswith(SIM_PREFIX)
            and _sim_embedding(model) == _sim_embedding(task_model))
    (name, version), (task_name, task_version) = split_ref(model), split_ref(task_model)
    return name == task_name and (version is None or task_version is None
                                  or version == task_version)


def _sim_embedding(name: str) -> str:
    """The `embedding=` value of a simulated model's name; empty for top-k."""
    for part in name[len(SIM_PREFIX):].split(","):
        key, _, value = part.partition("=")
        if key.strip() == "embedding":
            return value.strip()
    return ""


class InlineItem(TypedDict):
    name: str
    data: bytes


class Job(TypedDict):
    job_id: str
    model: str
    model_version: int | None
    pool: str
    top_k: int
    chunk_size: int
    inputs: list[str]
    inline_items: list[InlineItem]
    submitted_at: int
    submitter: str
    output_path: str | None
    #: higher first; 0 by default
    priority: int
    #: the job's share among its priority's running jobs of its pool, > 0; 1.0 by default
    weight: float


class TaskItem(TypedDict):
    index: int
    name: str
    data: bytes | None


class Task(TypedDict):
    job_id: str
    task_id: int
    attempt: int
    pool: str
    model: str
    model_version: int | None
    top_k: int
    items: list[TaskItem]
    issued_at: int
    deadline_ms: int | None
    home_partition: int | None


def new_task(job: Job, task_id: int, items: list[TaskItem], attempt: int = 1,
             home_partition: int | None = None, model_version: int | None = None) -> Task:
    """Task `task_id` of `job`, issued now, on `model_version` of its model (None: the
    job's pinned one, if any); its results go to `home_partition`."""
    version = job["model_version"] if model_version is None else model_version
    return Task(job_id=job["job_id"], task_id=task_id, attempt=attempt, pool=job["pool"],
                model=job["model"], model_version=version, top_k=job["top_k"], items=items,
                issued_at=now_ms(), deadline_ms=None, home_partition=home_partition)


class JobEventType(StrEnum):
    ACCEPTED = "ACCEPTED"
    REJECTED = "REJECTED"
    PROGRESS = "PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class JobEvent(TypedDict):
    job_id: str
    type: JobEventType
    timestamp: int
    model: str | None
    model_version: int | None
    reason: str | None
    total_items: int | None
    total_tasks: int | None
    done_items: int
    ok_items: int
    error_items: int
    rate_items_per_s: float | None
    home_partition: int | None
    priority: int
    weight: float
