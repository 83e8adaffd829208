"""Issue 14.2 and 14.3 on a real broker and a real Prometheus: Debian's `prometheus` scrapes a
controller, two workers, a sysinfo replica and a stream member through a job and a stream;
PromQL then gives the job's item count and each worker's throughput, every role's /metrics
passes `promtool check metrics`, the rules of ops/prometheus/ load and evaluate, and every
query of the Grafana dashboard returns data."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.kafka.settings import producer_config
from tests.integration.conftest import Processes
from tests.integration.test_stream import make_topics, member
from tests.integration.test_sysinfo import free_port, start_replica
from tests.prometheus import PrometheusServer
from tests.unit.prometheus_binaries import REPO, RULES, require
from tests.unit.promtool import check_metrics

DASHBOARD = REPO / "ops" / "grafana" / "dashboards" / "inferstream.json"
ITEMS = 3000
#: What the dashboard's variables stand for here: every pool, Grafana's own rate window.
VARIABLES = {"pool": ".*", "__rate_interval": "1m"}


def scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        body: bytes = reply.read()
    return body


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, the variables put in."""
    panels: list[dict[str, Any]] = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        panels += [panel, *panel.get("panels", [])]
    found = []
    for panel in panels:
        for target in panel.get("targets", []):
            expr = re.sub(r"\$(?:\{(\w+)\}|(\w+))",
                          lambda m: VARIABLES[m.group(1) or m.group(2)], target["expr"])
            found.append((panel["title"], expr))
    return found


def per_worker(prometheus: PrometheusServer, expr: str) -> dict[str, float]:
    return {s["metric"]["worker"]: float(s["value"][1]) for s in prometheus.query(expr)}


@pytest.mark.timeout(600)
def test_prometheus_sees_every_role_through_a_job_and_a_stream(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    require("prometheus")
    ports = {name: free_port() for name in ("controller", "w1", "w2", "sysinfo", "stream")}
    start_replica(procs, "sysinfo", ports["sysinfo"])
    procs.controller("--metrics-port", str(ports["controller"]))
    for name in ("w1", "w2"):
        procs.worker("sim:ms=4", "--metrics-port", str(ports[name]), name=name)
    topics = make_topics(config, input=2, output=2)
    member(procs, "stream", "sim:ms=2", topics, "--input-format", "bytes",
           "--metrics-port", str(ports["stream"]))
    targets = [("inferstream-controller", f"127.0.0.1:{ports['controller']}"),
               ("inferstream-worker", f"127.0.0.1:{ports['w1']}"),
               ("inferstream-worker", f"127.0.0.1:{ports['w2']}"),
               ("inferstream-sysinfo", f"127.0.0.1:{ports['sysinfo']}"),
               ("inferstream-stream", f"127.0.0.1:{ports['stream']}")]
    with PrometheusServer(targets, tmp_path / "prometheus", rule_files=[RULES]) as prometheus:
        prometheus.wait_for_targets_up(timeout_s=180)  # each role up, serving /metrics
        started = time.time()
        producer = Producer(producer_config(config))
        for n in range(200):
            producer.produce(topics["input"], f"image-{n}".encode(), key=f"k{n}".encode())
        producer.flush(30)
        names = tmp_path / "items.txt"
        names.write_text("".join(f"item-{n:05d}\n" for n in range(ITEMS)))
        job = Client(config).submit("sim:ms=4", [f"@{names}"], chunk_size=20)
        status = job.wait(timeout_s=300)
        assert status.ok_items == ITEMS

        done = prometheus.wait_for(
            f'sum(inferstream_controller_items_done_total{{status="ok"}}) == {ITEMS}', 60)
        assert float(done[0]["value"][1]) == ITEMS
        rates = per_worker(prometheus, 'sum by (worker) '
                           '(rate(inferstream_items_processed_total{pool="default"}[1m]))')
        assert set(rates) == {"w1", "w2"} and all(r > 0 for r in rates.values()), rates
        # each item once, by the pool's workers (the stream member counts in its own pool)
        prometheus.wait_for(
            f'sum(inferstream_items_processed_total{{pool="default"}}) == {ITEMS}', 30)
        # every task committed: at most the controller's last commit marker is left
        prometheus.wait_for('max(inferstream_consumer_lag_records{pool="default"}) <= 1', 30)
        prometheus.wait_for('sum(inferstream_stream_records_total{status="ok"}) == 200', 120)
        prometheus.wait_for("inferstream:pool_items_per_second:rate1m", 30)
        prometheus.wait_for('inferstream_policy_share{worker="w1"} > 0', 60)

        for name, port in ports.items():  # Prometheus' linter on what each role serves
            exposition = scrape(port)
            assert b"inferstream_" in exposition, name
            check_metrics(exposition)
        rules = [r for group in prometheus.rule_groups() for r in group["rules"]]
        assert rules and all(r["health"] == "ok" for r in rules), rules

        ended = time.time() + 2
        time.sleep(2)
        empty = [(title, expr) for title, expr in dashboard_queries()
                 if not prometheus.query_range(expr, started, ended, 1.0)]
        assert not empty, f"dashboard queries with no data: {empty}"
