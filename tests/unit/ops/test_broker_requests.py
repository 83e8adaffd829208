"""`ops/bench/broker_requests.py` reads the broker's request counts from JmxTool and reports
them per second idle and per task during a job."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import broker_requests

# JmxTool --one-time true --report-format properties (Kafka 4.4): two versions of Fetch
JMX = """Trying to connect to JMX url: service:jmx:rmi:///jndi/rmi://127.0.0.1:9999/jmxrmi
time=1796534839439
kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Fetch,version=16:Count=2
kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Fetch,version=17:Count=40
kafka.network:type=RequestMetrics,name=RequestsPerSec,request=FetchConsumer,version=17:Count=40
kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Heartbeat,version=1:Count=7
"""


def test_counts_are_summed_over_versions_and_a_fetch_counted_once() -> None:
    assert broker_requests.parse_counts(JMX) == {"Fetch": 42, "Heartbeat": 7}
    assert broker_requests.parse_counts("no such object") == {}


def test_a_run_reports_idle_rates_and_costs_a_task() -> None:
    run = broker_requests.Run("tree", idle_s=10.0, idle_cpu_s=2.0,
                              idle_requests={"Fetch": 600, "Heartbeat": 100},
                              job_s=60.0, job_cpu_s=20.0, tasks=1000,
                              job_requests={"Fetch": 7000, "EndTxn": 1200},
                              appended={"results": 2000})
    text = "\n".join(run.lines())
    assert "idle 20.0 % of a core, 70 requests/s" in text
    assert "20.00 ms of CPU a task, 8.2 requests and 2.0 records appended a task" in text
    assert "EndTxn" in text and "1.20/task" in text
    assert "appended to results" in text


def test_counts_that_grew() -> None:
    assert broker_requests.grown({"a": 5, "b": 3, "c": 1}, {"a": 2, "b": 3}) == {"a": 3, "c": 1}


def test_a_run_without_a_job_reports_the_idle_pool_alone() -> None:
    run = broker_requests.Run("tree", idle_s=10.0, idle_cpu_s=1.0, idle_requests={"Fetch": 250})
    text = "\n".join(run.lines())
    assert "idle 10.0 % of a core, 25 requests/s" in text
    assert "Fetch" in text and "25.0/s" in text
    assert "ms of CPU a task" not in text
