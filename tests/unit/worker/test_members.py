"""`inferstream worker --members N` (issue 15.1) without a broker: each member's settings,
its log lines tagged with its worker id, and its own children of the worker's metrics."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from inferstream.config import Config, WorkerConfig
from inferstream.errors import ConfigError
from inferstream.worker.members import (
    MemberLogFilter,
    member_configs,
    member_metrics,
    run_members,
)
from inferstream.worker.metrics import WorkerMetrics
from tests.unit.promtool import sample


def test_each_member_has_its_own_worker_and_instance_id() -> None:
    config = Config(worker=WorkerConfig(models=("sim:ms=1",), members=3, instance_id="node"))
    members = member_configs(config, "host")
    assert [m.worker.worker_id for m in members] == ["host-0", "host-1", "host-2"]
    assert [m.worker.instance_id for m in members] == ["node-0", "node-1", "node-2"]
    assert all(m.worker.members == 1 and m.worker.models == ("sim:ms=1",) for m in members)


def test_members_must_be_at_least_one() -> None:
    with pytest.raises(ConfigError, match="members"):
        Config(worker=WorkerConfig(members=0))


class Member:
    """Stands in for a Worker: logs from its run, stops when asked."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.stopped = asyncio.Event()

    def request_stop(self) -> None:
        self.stopped.set()

    async def run(self) -> None:
        logging.getLogger("test.member").info("running")
        await asyncio.sleep(0)
        await asyncio.get_running_loop().create_task(self._inner())  # inherits the member
        await self.stopped.wait()

    async def _inner(self) -> None:
        logging.getLogger("test.member").info("inner task")


def test_every_member_runs_and_stops_and_its_lines_name_it(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.handler.addFilter(MemberLogFilter())
    members = [Member("a-0"), Member("a-1")]
    stops = []

    async def main() -> None:
        task = asyncio.create_task(run_members(members, stops.append))
        await asyncio.sleep(0.05)
        stops[0]()  # what SIGTERM calls, from the signal watcher's thread
        await asyncio.wait_for(task, 5)

    with caplog.at_level(logging.INFO, logger="test.member"):
        asyncio.run(main())
    lines = sorted(r.getMessage() for r in caplog.records if r.name == "test.member")
    assert lines == ["[a-0] inner task", "[a-0] running", "[a-1] inner task", "[a-1] running"]
    assert all(m.stopped.is_set() for m in members)


def test_members_count_under_their_own_worker_label() -> None:
    first = WorkerMetrics(CollectorRegistry(), "h-0", "default")
    second = first.for_worker("h-1")
    first.after_task("sim:ms=1", 3, 0)
    second.after_task("sim:ms=1", 5, 1)
    second.on_assignment(4)
    r = first.registry
    ok = {"pool": "default", "model": "sim:ms=1", "status": "ok"}
    assert sample(r, "inferstream_items_processed_total", worker="h-0", **ok) == 3
    assert sample(r, "inferstream_items_processed_total", worker="h-1", **ok) == 5
    assert sample(r, "inferstream_assigned_partitions", worker="h-1", pool="default") == 4
    assert sample(r, "inferstream_assigned_partitions", worker="h-0", pool="default") == 0


def test_the_process_s_own_id_is_no_worker_beside_its_members() -> None:
    """`--members 2 --worker-id w` reported a worker `w` at 0 partitions, 0 in flight, beside
    w-0 and w-1: a worker of the pool on every per-worker panel that is none."""
    config = Config(worker=WorkerConfig(models=("sim:ms=1",), members=2))
    metrics = WorkerMetrics(CollectorRegistry(), "w", "default")
    first, second = member_metrics(metrics, member_configs(config, "w"))
    first.on_assignment(3)
    second.on_assignment(2)
    workers = {s.labels["worker"] for family in metrics.registry.collect()
               for s in family.samples if "worker" in s.labels}
    assert workers == {"w-0", "w-1"}
    assert sample(metrics.registry, "inferstream_assigned_partitions",
                  worker="w-1", pool="default") == 2
