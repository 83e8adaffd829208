"""A worker's probes follow what it does on the in-memory broker: not ready until it has
joined its group."""

from __future__ import annotations

from collections.abc import Callable

from inferstream.http import Health
from inferstream.serving.health import HealthHooks
from inferstream.serving.hooks import HookChain
from inferstream.serving.loop import Worker
from tests.unit.support.memory import make_config
from tests.unit.support.running import Running


def test_a_worker_is_ready_once_it_has_joined_its_group(
        make_worker: Callable[..., Worker], running: Running) -> None:
    config = make_config()
    health = Health()
    worker = make_worker(config, hooks=HookChain(
        HealthHooks(health, "worker w1", config.worker_group())))
    assert health.readiness() == (503, "worker w1 has not joined group t.default.workers yet")
    assert health.liveness() == (200, "ok")
    running.workers(worker)
    running.until(lambda: health.readiness() == (200, "ready"))
    assert health.liveness() == (200, "ok")
