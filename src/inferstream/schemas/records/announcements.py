"""What a worker says of itself before it can take tasks: a WorkerAnnouncement."""

from __future__ import annotations

from enum import StrEnum
from typing import TypedDict


class WorkerState(StrEnum):
    STARTING = "STARTING"
    SERVING = "SERVING"
    STOPPED = "STOPPED"


class WorkerAnnouncement(TypedDict):
    worker: str
    pool: str
    models: list[str]
    #: the versions of each repository model it serves, oldest first, by model name
    model_versions: dict[str, list[int]]
    state: WorkerState
    started_at: int
    timestamp: int
    interval_s: float
