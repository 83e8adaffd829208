"""A controller replica's probes follow what it does on the in-memory broker: not ready
until a round has consumed."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from inferstream.controller.health import ProbedMetrics
from inferstream.controller.replica import Controller
from inferstream.http import Health
from tests.unit.support.running import Running


def test_a_controller_is_ready_once_a_round_has_consumed(
        make_controller: Callable[..., Controller], running: Running) -> None:
    health = Health()
    controller = make_controller(hooks=ProbedMetrics(CollectorRegistry(), health))
    assert health.readiness() == (503, "starting: no round has consumed yet")
    running.controller(controller)
    running.until(lambda: health.readiness() == (200, "ready"))
