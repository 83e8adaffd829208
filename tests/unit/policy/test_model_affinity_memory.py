"""A pool serving two models, in memory, with the policy's model ranges: the assignor gives
each model's partitions only to its workers and the controller puts each job's tasks there,
so no task is declined and every result comes from a worker of its job's model."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from inferstream.client import Client
from inferstream.config import Config
from inferstream.controller.replica import Controller
from inferstream.models import LoadedModel, load_model
from inferstream.models.sim import SimModel, parse_sim_name
from inferstream.policy.table import PolicyTable
from inferstream.schemas.records import ModelRange, PolicyEntry, read_result
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import CODEC, make_config, new_broker
from tests.unit.support.policies import FixedPolicy, entry, write
from tests.unit.support.records import consumed, settled
from tests.unit.support.running import Running

#: A registry name served by a simulated model: a second model that costs no CPU.
OTHER = "resnet50"
RANGES = [ModelRange(OTHER, 0, 4), ModelRange("sim:ms=0", 4, 4)]
CONFIG = make_config(task_partitions=8)


def worker_config(worker_id: str, models: tuple[str, ...]) -> Config:
    return make_config(task_partitions=8, worker={
        "models": models, "worker_id": worker_id, "decode_threads": 1,
        "sysinfo_interval_s": 0, "calibration_items": 0, "min_rebalance_interval_s": 0.0})


@pytest.fixture
def broker() -> MemoryBroker:
    """The test's broker: 8 task partitions, 4 for each model."""
    return new_broker(CONFIG)


def write_policy(broker: MemoryBroker) -> None:
    workers = [PolicyEntry(**{**entry(w, s), "models": [m]})
               for w, s, m in (("other-1", 0.5, OTHER), ("sim-1", 0.25, "sim:ms=0"),
                               ("sim-2", 0.25, "sim:ms=0"))]
    pool = PolicyEntry(**{**entry("", 1.0), "models": [OTHER, "sim:ms=0"],
                          "model_partitions": RANGES})
    write(broker, *workers, pool)


def owners(broker: MemoryBroker) -> dict[str, set[int]]:
    return {client: {p for _, p in parts} for _, client, parts
            in broker.describe_group(CONFIG.worker_group())}


def test_two_models_each_on_its_own_partitions_and_no_task_declined(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running,
        make_worker: Callable[..., Worker], make_controller: Callable[..., Controller]
        ) -> None:
    write_policy(broker)
    models: list[tuple[str, LoadedModel]] = [
        ("other-1", SimModel(OTHER, parse_sim_name("sim:ms=0"))),
        ("sim-1", load_model("sim:ms=0")), ("sim-2", load_model("sim:ms=0"))]
    table = PolicyTable(CONFIG, clients, CODEC, max_age_s=60)
    table.start()
    try:
        running.workers(*(make_worker(worker_config(w, (m.name,)), m) for w, m in models))
        running.wait_for(lambda: owners(broker).get("other-1") == {0, 1, 2, 3})
        client = Client(CONFIG, CODEC, clients)
        other = client.submit(OTHER, [f"o-{i}" for i in range(24)], chunk_size=1)
        sim = client.submit("sim:ms=5", [f"s-{i}" for i in range(24)], chunk_size=1)
        running.controller(make_controller(CONFIG, FixedPolicy(ranges=table.model_ranges)))
        running.until(lambda: settled(broker, CONFIG, jobs=2)() and consumed(
            broker, CONFIG.worker_group(), CONFIG.task_topic()))
    finally:
        table.stop()

    other_lines, sim_lines = list(other.results()), list(sim.results())
    assert len(other_lines) == len(sim_lines) == 24
    assert {line["worker"] for line in other_lines} == {"other-1"}
    assert {line["worker"] for line in sim_lines} <= {"sim-1", "sim-2"}
    assert all(line["status"] == "ok" for line in other_lines + sim_lines)
    results = [read_result(CODEC, v) for v in broker.values("t.results")]
    assert [r for r in results if "served_models" in r] == []  # no TaskDeclined at all
    assert {r["model"] for r in results if r["job_id"] == other.job_id} == {OTHER}
