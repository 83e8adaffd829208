"""How the controller tracks jobs and tasks: the entries of its ledger, and the TaskControl
records that tell workers a task is over (finished, migrated, cancelled)."""

from __future__ import annotations

from enum import StrEnum
from typing import TypedDict

from inferstream.schemas.records.clock import now_ms


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
    max_attempt: int
    model_version: int | None
    accepted_at: int
    updated_at: int


def new_ledger_entry(job_id: str, task_id: int, kind: LedgerKind,
                     status: LedgerStatus) -> LedgerEntry:
    """A ledger entry with every count at zero; the caller fills in what it knows."""
    return LedgerEntry(job_id=job_id, task_id=task_id, kind=kind, status=status, job=None,
                       issued_tasks=0, issued_items=0, expanded=False, done_tasks=0,
                       ok_items=0, error_items=0, attempts=1, worker=None, item_count=0,
                       output_written_at=None, max_attempt=0, model_version=None,
                       accepted_at=0, updated_at=now_ms())


class TaskControlReason(StrEnum):
    MIGRATED = "MIGRATED"
    FINISHED = "FINISHED"
    CANCELLED = "CANCELLED"


class TaskControl(TypedDict):
    job_id: str
    task_id: int
    attempt: int
    reason: TaskControlReason
    at: int
