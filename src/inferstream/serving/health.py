"""The health probes of a worker or stream member, fed by its data path's hooks."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from inferstream.config import Config
from inferstream.http import Health, HttpGuard
from inferstream.metrics import serve_metrics
from inferstream.serving.hooks import WorkerHooks


def serve_health(config: Config, registry: CollectorRegistry, loading: str) -> Health:
    """Serve /metrics of `registry` and the probes on `worker.metrics_port` (none: no
    server), answering 503 `loading` until the caller says `done()`; the health for its
    `HealthHooks`."""
    health = Health()
    health.waiting(loading)
    settings = config.worker
    if settings.metrics_port:  # the address and port were checked by preflight
        serve_metrics(registry, settings.metrics_port, settings.metrics_addr,
                      guard=HttpGuard.of(config), health=health)
    return health


class HealthHooks(WorkerHooks):
    """Tells `health` that member `member` (one worker of the process) has joined its group
    (ready from its first assignment on) and that its loop runs (every hook is a beat)."""

    def __init__(self, health: Health, member: str, group: str) -> None:
        self.health, self.member = health, member
        health.waiting(f"{member} has not joined group {group} yet", member)

    def after_rebalance(self) -> None:
        self.health.beat()
        self.health.done(self.member)

    def on_load(self, in_flight_items: int, lags: dict[int, int]) -> None:
        self.health.beat()

    def after_batch(self, model: str, size: int, seconds: float,
                    version: str | None = None) -> None:
        self.health.beat()

    def after_commit(self, partition: int, offset: int, seconds: float) -> None:
        self.health.beat()
