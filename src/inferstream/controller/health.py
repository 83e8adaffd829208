"""A controller replica's health probes, fed by its rounds."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from inferstream.controller.hooks import RoundState
from inferstream.controller.metrics import ControllerMetrics
from inferstream.http import Health


class ProbedMetrics(ControllerMetrics):
    """The replica's metrics, whose rounds also tell `health` that the replica consumes:
    ready from its first round on, alive while rounds keep coming (one per poll at least)."""

    def __init__(self, registry: CollectorRegistry, health: Health) -> None:
        super().__init__(registry)
        self.health = health
        health.waiting("starting: no round has consumed yet")

    def after_round(self, seconds: float, state: RoundState) -> None:
        super().after_round(seconds, state)
        self.health.beat()
        self.health.done()
