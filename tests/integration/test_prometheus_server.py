"""`tests.prometheus.PrometheusServer` runs a real Prometheus that scrapes a target, loads the
project's rules and evaluates them; a stand-in registry plays the roles here. No broker: it is
here because Prometheus hands targets to its scraper only after about 5 s, too long for the
unit suite (tests/unit/ops/test_prometheus_server.py has the rest)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from tests.prometheus import PrometheusServer
from tests.unit.prometheus_binaries import RULES, require


@pytest.fixture
def worker_metrics() -> Iterator[str]:
    """A /metrics endpoint with a few worker and sysinfo families; its host:port."""
    registry = CollectorRegistry()
    items = Counter("inferstream_items_processed", "Items processed, by outcome",
                    ["worker", "pool", "model", "status"], registry=registry)
    items.labels("w1", "gpu", "googlenet", "ok").inc(42)
    workers = Gauge("inferstream_sysinfo_workers", "Workers by health", ["pool", "health"],
                    registry=registry)
    workers.labels("gpu", "HEALTHY").set(0)
    workers.labels("gpu", "STALE").set(2)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.slow  # Prometheus hands targets to its scraper after about 5 s
@pytest.mark.timeout(90)
def test_prometheus_scrapes_the_target_and_evaluates_the_rules(
        worker_metrics: str, tmp_path: Path) -> None:
    binary = require("prometheus")
    with PrometheusServer([("inferstream-worker", worker_metrics)], tmp_path,
                          rule_files=[RULES], binary=binary) as prometheus:
        prometheus.wait_for_targets_up()
        [sample] = prometheus.query('inferstream_items_processed_total{pool="gpu"}')
        assert sample["metric"]["job"] == "inferstream-worker"
        assert sample["metric"]["worker"] == "w1"
        assert float(sample["value"][1]) == 42

        groups = {group["name"]: group for group in prometheus.rule_groups()}
        assert set(groups) == {"inferstream.recording", "inferstream.alerts"}
        alerts = {rule["name"] for rule in groups["inferstream.alerts"]["rules"]}
        assert "InferstreamPoolNoLiveWorker" in alerts
        # Only STALE workers in pool gpu: the rule sees it (pending for its first minute).
        [alert] = prometheus.wait_for('ALERTS{alertname="InferstreamPoolNoLiveWorker"}')
        assert alert["metric"]["pool"] == "gpu"
        assert alert["metric"]["alertstate"] == "pending"
    assert prometheus.log_path.exists()
