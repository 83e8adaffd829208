"""A pool serving two models, in memory, with the policy's model ranges: the assignor gives
each model's partitions only to its workers and the controller puts each job's tasks there,
so no task is declined and every result comes from a worker of its job's model."""

from __future__ import annotations

import asyncio
import threading
import time

from inferstream.client import Client
from inferstream.config import Config, ControllerConfig, WorkerConfig
from inferstream.controller.replica import Controller
from inferstream.kafka.topics import topic_specs
from inferstream.models import LoadedModel, load_model
from inferstream.models.sim import SimModel, parse_sim_name
from inferstream.policy.table import PolicyTable
from inferstream.schemas import Codec
from inferstream.schemas.records import ModelRange, PolicyEntry, read_result
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.worker import new_worker
from tests.unit.policy.test_policy_table import entry, write
from tests.unit.support.policies import FixedPolicy

CODEC = Codec(None)
#: A registry name served by a simulated model: a second model that costs no CPU.
OTHER = "resnet50"
RANGES = [ModelRange(OTHER, 0, 4), ModelRange("sim:ms=0", 4, 4)]


def make_config(worker_id: str = "w", models: tuple[str, ...] = ("sim:ms=0",)) -> Config:
    return Config(
        bootstrap_servers="mem:1", topic_prefix="t.", partitions=2, task_partitions=8,
        worker=WorkerConfig(models=models, worker_id=worker_id, idle_exit_s=1.0,
                            max_wait_ms=1.0, decode_threads=1, sysinfo_interval_s=0,
                            calibration_items=0, min_rebalance_interval_s=0.0),
        controller=ControllerConfig(idle_exit_s=0.3, watchdog_s=None,
                                    progress_interval_s=0.0))


def write_policy(broker: MemoryBroker) -> None:
    workers = [PolicyEntry(**{**entry(w, s), "models": [m]})
               for w, s, m in (("other-1", 0.5, OTHER), ("sim-1", 0.25, "sim:ms=0"),
                               ("sim-2", 0.25, "sim:ms=0"))]
    pool = PolicyEntry(**{**entry("", 1.0), "models": [OTHER, "sim:ms=0"],
                          "model_partitions": RANGES})
    write(broker, *workers, pool)


def owners(broker: MemoryBroker) -> dict[str, set[int]]:
    return {client: {p for _, p in parts} for _, client, parts
            in broker.describe_group(make_config().worker_group())}


def wait_for(check: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_two_models_each_on_its_own_partitions_and_no_task_declined() -> None:
    broker = MemoryBroker()
    broker.create_topics(topic_specs(make_config()))
    clients = MemoryKafkaClients(broker)
    write_policy(broker)
    models: list[tuple[str, LoadedModel]] = [
        ("other-1", SimModel(OTHER, parse_sim_name("sim:ms=0"))),
        ("sim-1", load_model("sim:ms=0")), ("sim-2", load_model("sim:ms=0"))]
    pool = [new_worker(make_config(w, (m.name,)), m, codec=CODEC, clients=clients)
            for w, m in models]

    async def serve() -> None:
        await asyncio.gather(*(w.run() for w in pool))

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="workers")
    table = PolicyTable(make_config(), clients, CODEC, max_age_s=60)
    table.start()
    thread.start()
    try:
        wait_for(lambda: owners(broker).get("other-1") == {0, 1, 2, 3})
        client = Client(make_config(), CODEC, clients)
        other = client.submit(OTHER, [f"o-{i}" for i in range(24)], chunk_size=1)
        sim = client.submit("sim:ms=5", [f"s-{i}" for i in range(24)], chunk_size=1)
        Controller(make_config(), codec=CODEC, clients=clients,
                   policy=FixedPolicy(ranges=table.model_ranges)).run()
    finally:
        thread.join(30)
        table.stop()

    other_lines, sim_lines = list(other.results()), list(sim.results())
    assert len(other_lines) == len(sim_lines) == 24
    assert {line["worker"] for line in other_lines} == {"other-1"}
    assert {line["worker"] for line in sim_lines} <= {"sim-1", "sim-2"}
    assert all(line["status"] == "ok" for line in other_lines + sim_lines)
    results = [read_result(CODEC, v) for v in broker.values("t.results")]
    assert [r for r in results if "served_models" in r] == []  # no TaskDeclined at all
    assert {r["model"] for r in results if r["job_id"] == other.job_id} == {OTHER}
