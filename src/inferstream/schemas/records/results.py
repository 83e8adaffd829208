"""What a worker answers a task with: a TaskResult (one ItemResult per item), or a
TaskDeclined when it does not serve the task's model."""

from __future__ import annotations

from enum import StrEnum
from typing import TypedDict

from inferstream.schemas.records.jobs import TaskItem


class ItemStatus(StrEnum):
    OK = "OK"
    ERROR = "ERROR"


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


def ok_item(item: TaskItem, top_k: list[Prediction]) -> ItemResult:
    return ItemResult(index=item["index"], name=item["name"], status=ItemStatus.OK,
                      top_k=top_k, error=None)


def error_item(item: TaskItem, reason: str) -> ItemResult:
    return ItemResult(index=item["index"], name=item["name"], status=ItemStatus.ERROR,
                      top_k=[], error=reason)
