"""A worker's metrics: the data path's, and the task records it declined, skipped or
could not read."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from inferstream.metrics import reason_label
from inferstream.serving.metrics import ServingMetrics
from inferstream.supervise.child import count_restarts


class WorkerMetrics(ServingMetrics):
    """A worker's metrics: the data path's, declined and skipped tasks by model, and dead
    letters by reason."""

    def __init__(self, registry: CollectorRegistry, worker: str = "", pool: str = "") -> None:
        super().__init__(registry, worker, pool)
        self.restarts = count_restarts(registry, "worker")
        self.dead_letters = Counter(
            "inferstream_dead_letters_total", "Task records sent to the dead-letter topic",
            ["reason"], registry=registry,
        )
        self.declined = Counter(
            "inferstream_tasks_declined_total",
            "Tasks declined because the worker does not serve their model", ["model"],
            registry=registry,
        )
        self.skipped = Counter(
            "inferstream_tasks_skipped_total",
            "Tasks not run: their job had finished or a later attempt superseded them",
            ["model"], registry=registry,
        )

    def after_decline(self, model: str) -> None:
        self.declined.labels(model).inc()

    def after_skip(self, model: str) -> None:
        self.skipped.labels(model).inc()

    def after_dead_letter(self, reason: str) -> None:
        self.dead_letters.labels(reason_label(reason)).inc()
