"""Typed records: one TypedDict per Avro record of `schemas/*.avsc`, status enums, builders.

`dict[str, Any]` stops at the codec: what crosses Kafka is built here (one `new_*` builder
per record kind) and read back through the `read_*` functions, which also turn enum symbols
into the enums below. `tests/unit/schemas/test_records.py` fails when a type here and its `.avsc`
disagree on a field's name or on whether it may be null.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import TypedDict, cast

from inferstream.schemas.codec import Codec
from inferstream.schemas.errors import SchemaError

#: Simulated models: `sim:ms=N,...`, whose parameters describe a node's speed, not a model.
SIM_PREFIX = "sim:"
#: The names of simulated models (parsed by `models.names.parse_sim_name`).
SIM_SYNTAX = ("sim:ms=N[,jitter=F][,slow_after=K,slow_factor=X] (as=alexnet or as=googlenet "
              "instead of ms; batch_ms=B, slower=S)")


def serves(model: str, task_model: str) -> bool:
    """Whether a result of `model` answers a Task asking for `task_model`: the same name,
    or any simulated model for a simulated task."""
    return model == task_model or (model.startswith(SIM_PREFIX)
                                   and task_model.startswith(SIM_PREFIX))


def now_ms() -> int:
    """Milliseconds since the Unix epoch: the unit of every timestamp field."""
    return int(time.time() * 1000)


# -- enums ------------------------------------------------------------------------------------
class ItemStatus(StrEnum):
    OK = "OK"
    ERROR = "ERROR"


class JobEventType(StrEnum):
    ACCEPTED = "ACCEPTED"
    REJECTED = "REJECTED"
    PROGRESS = "PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class LedgerKind(StrEnum):
    JOB = "JOB"
    TASK = "TASK"


class LedgerStatus(StrEnum):
    """Job statuses (ACTIVE, COMPLETED, REJECTED, FAILED, CANCELLED) and task statuses
    (ISSUED, DONE)."""

    ACTIVE = "ACTIVE"
    COMPLETED = "COMPLETED"
    REJECTED = "REJECTED"
    FAILED = "FAILED"
    ISSUED = "ISSUED"
    DONE = "DONE"
    CANCELLED = "CANCELLED"


class TaskControlReason(StrEnum):
    MIGRATED = "MIGRATED"
    FINISHED = "FINISHED"
    CANCELLED = "CANCELLED"


class PolicyKind(StrEnum):
    WORKER = "WORKER"
    POOL = "POOL"


class WorkerHealth(StrEnum):
    HEALTHY = "HEALTHY"
    STALE = "STALE"
    GONE = "GONE"


# -- records ----------------------------------------------------------------------------------
class InlineItem(TypedDict):
    name: str
    data: bytes


class Job(TypedDict):
    job_id: str
    model: str
    pool: str
    top_k: int
    chunk_size: int
    inputs: list[str]
    inline_items: list[InlineItem]
    submitted_at: int
    submitter: str
    output_path: str | None


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
    top_k: int
    items: list[TaskItem]
    issued_at: int
    deadline_ms: int | None
    home_partition: int | None


class Prediction(TypedDict):
    class_id: int
    label: str
    score: float


class ItemResult(TypedDict):
    index: int
    name: str
    status: ItemStatus
    top_k: list[Prediction]
    error: str | None


class TaskResult(TypedDict):
    job_id: str
    task_id: int
    attempt: int
    worker: str
    model: str
    items: list[ItemResult]
    started_at: int
    finished_at: int
    decode_seconds: float
    inference_seconds: float


class TaskDeclined(TypedDict):
    job_id: str
    task_id: int
    attempt: int
    worker: str
    model: str
    served_models: list[str]
    reason: str
    task: bytes
    declined_at: int


class JobEvent(TypedDict):
    job_id: str
    type: JobEventType
    timestamp: int
    model: str | None
    reason: str | None
    total_items: int | None
    total_tasks: int | None
    done_items: int
    ok_items: int
    error_items: int
    rate_items_per_s: float | None
    home_partition: int | None


class LedgerEntry(TypedDict):
    job_id: str
    task_id: int
    kind: LedgerKind
    status: LedgerStatus
    job: bytes | None
    issued_tasks: int
    issued_items: int
    expanded: bool
    done_tasks: int
    ok_items: int
    error_items: int
    attempts: int
    worker: str | None
    item_count: int
    output_written_at: int | None
    accepted_at: int
    updated_at: int


class TaskControl(TypedDict):
    job_id: str
    task_id: int
    attempt: int
    reason: TaskControlReason
    at: int


class StreamOrigin(TypedDict):
    topic: str
    partition: int
    offset: int
    timestamp: int | None


class StreamResult(TypedDict):
    """The label of one input record of a stream (`--output-format avro`)."""

    status: ItemStatus
    top_k: list[Prediction]
    error: str | None
    model: str
    worker: str
    origin: StreamOrigin
    labelled_at: int


class DeadLetter(TypedDict):
    origin_topic: str
    origin_partition: int
    origin_offset: int
    reason: str
    key: bytes | None
    value: bytes | None
    timestamp: int
    origin_timestamp: int | None
    consumer: str


class ModelPerformance(TypedDict):
    model: str
    version: str | None
    items: int
    items_per_s: float
    batch_latency_seconds_p50: float | None
    batch_latency_seconds_p95: float | None
    item_seconds: float | None
    mean_batch_size: float | None


class Calibration(TypedDict):
    model: str
    items_per_s: float
    batch_size: int
    seconds: float
    measured_at: int


class SysInfoSample(TypedDict):
    worker: str
    pool: str
    host: str
    timestamp: int
    model: str | None
    device: str
    cpu_percent: float
    memory_bytes: int
    gpu_utilization: float | None
    gpu_memory_bytes: int | None
    throughput_items_per_s: float
    latency_seconds_p50: float | None
    queue_depth: int
    assigned_partitions: list[int]
    extra: dict[str, float]
    interval_s: float
    host_cpu_percent: float | None
    host_memory_available_bytes: int | None
    accelerator: str | None
    gpu_memory_total_bytes: int | None
    latency_seconds_p95: float | None
    consumer_lag: int | None
    served_models: list[str]
    models: list[ModelPerformance]
    calibration: Calibration | None
    software: dict[str, str]


class ModelPartitions(TypedDict):
    """Partitions `first` .. `first + count - 1` of a pool's task topic carry `model`'s tasks."""

    model: str
    first: int
    count: int


class PolicyEntry(TypedDict):
    worker: str
    pool: str
    model: str | None
    capacity_items_per_s: float
    weight: float
    strategy: str
    updated_at: int
    kind: PolicyKind
    share: float
    health: WorkerHealth
    batch_size: int | None
    task_size: int | None
    models: list[str]
    model_partitions: list[ModelPartitions]


#: Every TypedDict above by the name of its Avro record (top-level and nested).
RECORD_TYPES: dict[str, type] = {
    "Job": Job, "InlineItem": InlineItem, "Task": Task, "TaskItem": TaskItem,
    "TaskResult": TaskResult, "ItemResult": ItemResult, "Prediction": Prediction,
    "TaskDeclined": TaskDeclined,
    "JobEvent": JobEvent, "LedgerEntry": LedgerEntry, "DeadLetter": DeadLetter,
    "SysInfoSample": SysInfoSample, "ModelPerformance": ModelPerformance,
    "Calibration": Calibration, "PolicyEntry": PolicyEntry,
    "ModelPartitions": ModelPartitions, "TaskControl": TaskControl,
    "StreamResult": StreamResult, "StreamOrigin": StreamOrigin,
}


# -- builders ---------------------------------------------------------------------------------
def new_task(job: Job, task_id: int, items: list[TaskItem], attempt: int = 1,
             home_partition: int | None = None) -> Task:
    """Task `task_id` of `job`, issued now; its results go to `home_partition`."""
    return Task(job_id=job["job_id"], task_id=task_id, attempt=attempt, pool=job["pool"],
                model=job["model"], top_k=job["top_k"], items=items, issued_at=now_ms(),
                deadline_ms=None, home_partition=home_partition)


def ok_item(item: TaskItem, top_k: list[Prediction]) -> ItemResult:
    return ItemResult(index=item["index"], name=item["name"], status=ItemStatus.OK,
                      top_k=top_k, error=None)


def error_item(item: TaskItem, reason: str) -> ItemResult:
    return ItemResult(index=item["index"], name=item["name"], status=ItemStatus.ERROR,
                      top_k=[], error=reason)


def new_dead_letter(topic: str, partition: int, offset: int, reason: str,
                    value: bytes | None, consumer: str, key: bytes | None = None,
                    origin_timestamp_ms: int | None = None) -> DeadLetter:
    """An unreadable record with where it came from and why, dead-lettered now; its value
    as read (None stays None: a tombstone is not an empty record)."""
    return DeadLetter(origin_topic=topic, origin_partition=partition, origin_offset=offset,
                      reason=reason, key=key, value=value, timestamp=now_ms(),
                      origin_timestamp=origin_timestamp_ms, consumer=consumer)


def new_ledger_entry(job_id: str, task_id: int, kind: LedgerKind,
                     status: LedgerStatus) -> LedgerEntry:
    """A ledger entry with every count at zero; the caller fills in what it knows."""
    return LedgerEntry(job_id=job_id, task_id=task_id, kind=kind, status=status, job=None,
                       issued_tasks=0, issued_items=0, expanded=False, done_tasks=0,
                       ok_items=0, error_items=0, attempts=1, worker=None, item_count=0,
                       output_written_at=None, accepted_at=0, updated_at=now_ms())


# -- typed reads ------------------------------------------------------------------------------
def read_job(codec: Codec, value: bytes) -> Job:
    return cast(Job, codec.decode(value, expected="Job"))


def read_task(codec: Codec, value: bytes) -> Task:
    return cast(Task, codec.decode(value, expected="Task"))


def read_task_result(codec: Codec, value: bytes) -> TaskResult:
    result = cast(TaskResult, codec.decode(value, expected="TaskResult"))
    for item in result["items"]:
        item["status"] = ItemStatus(item["status"])
    return result


def read_result(codec: Codec, value: bytes) -> TaskResult | TaskDeclined:
    """A record of the results topic: a TaskResult, or a worker's TaskDeclined."""
    name, record = codec.decode_named(value)
    if name == "TaskDeclined":
        return cast(TaskDeclined, record)
    if name != "TaskResult":
        raise SchemaError(f"expected a TaskResult or TaskDeclined record, got a {name} record")
    result = cast(TaskResult, record)
    for item in result["items"]:
        item["status"] = ItemStatus(item["status"])
    return result


def read_job_event(codec: Codec, value: bytes) -> JobEvent:
    event = cast(JobEvent, codec.decode(value, expected="JobEvent"))
    event["type"] = JobEventType(event["type"])
    return event


def read_ledger_entry(codec: Codec, value: bytes) -> LedgerEntry:
    entry = cast(LedgerEntry, codec.decode(value, expected="LedgerEntry"))
    entry["kind"] = LedgerKind(entry["kind"])
    entry["status"] = LedgerStatus(entry["status"])
    return entry


def read_task_control(codec: Codec, value: bytes) -> TaskControl:
    control = cast(TaskControl, codec.decode(value, expected="TaskControl"))
    control["reason"] = TaskControlReason(control["reason"])
    return control


def read_policy_entry(codec: Codec, value: bytes) -> PolicyEntry:
    entry = cast(PolicyEntry, codec.decode(value, expected="PolicyEntry"))
    entry["kind"] = PolicyKind(entry["kind"])
    entry["health"] = WorkerHealth(entry["health"])
    return entry
