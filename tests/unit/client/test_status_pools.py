"""`status` and `top --jobs` of a fleet of several pools, on the in-memory transport: each
job's pool, and what a waiting job waits for."""

from __future__ import annotations

import json

from inferstream.client.client import Client
from inferstream.schemas.records import Job as JobRecord
from inferstream.schemas.records import JobEventType, read_record
from inferstream.testing import MemoryKafkaClients
from tests.unit.client.conftest import Cli
from tests.unit.support.fake_sysinfo import FakeSysInfo, worker
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.records import put_event


def test_status_and_top_jobs_name_each_jobs_pool_and_what_a_waiting_one_waits_for(
        clients: MemoryKafkaClients, cli: Cli) -> None:
    """Several pools: each job's pool (from its record on the jobs topic), the jobs grouped
    by pool, as each pool's jobs share only it, and under a waiting job its reason."""
    config = make_config()
    waits = "waiting for a worker of model 'alexnet': no live worker of pool 'edge' serves it"
    for pool, priority in (("gpu", 0), ("edge", 0), ("default", 5)):
        Client(make_config(pool=pool), CODEC, clients).submit(MODEL, ["a.jpg"],
                                                              priority=priority)
    jobs = [read_record(CODEC, v, JobRecord)
            for v in clients.broker.values(config.topic("jobs"))]
    for job in jobs:
        put_event(clients, config, job["job_id"], JobEventType.PROGRESS,
                  priority=job["priority"],
                  reason=waits if job["pool"] == "edge" else None)
    by_pool = {job["pool"]: job["job_id"] for job in jobs}
    gpu, edge, default = by_pool["gpu"], by_pool["edge"], by_pool["default"]

    _, out, _ = cli("status")
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert " pool=gpu" in lines[gpu] and " pool=edge" in lines[edge]
    assert "pool=" not in lines[default]
    _, printed, _ = cli("status", "--json")
    assert {s["job_id"]: s["pool"] for s in json.loads(printed)} == {
        gpu: "gpu", edge: "edge", default: "default"}

    app = FakeSysInfo()
    app.workers = [worker("w1")]
    with app.serving():
        _, out, _ = cli("top", "--once", "--jobs", "--sysinfo-url", app.url)
    rows = out.split("\nJOB ", 1)[1].splitlines()[1:]
    assert [row.split()[:2] for row in rows if not row.startswith(" ")] == [
        [default, "default"], [edge, "edge"], [gpu, "gpu"]]
    assert rows[2] == f"  {waits}"
