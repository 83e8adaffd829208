"""A pool of workers serving different models, in memory: every item gets the label of its
job's model; a task whose model no live worker serves fails with the reason (issue 9.1)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data as photos

from inferstream.client import Client
from inferstream.config import Config, ControllerConfig, WorkerConfig
from inferstream.controller.replica import Controller
from inferstream.kafka.topics import topic_specs
from inferstream.models import LoadedModel, load_model
from inferstream.schemas import Codec
from inferstream.schemas.records import read_result
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.worker import new_worker

CODEC = Codec(None)
LITE0 = "efficientnet_lite0"


def make_config(worker_id: str = "w", models: tuple[str, ...] = ("sim:ms=0",)) -> Config:
    return Config(
        bootstrap_servers="mem:1", topic_prefix="t.", partitions=2, task_partitions=2,
        # No sysinfo (so no calibration and no first sample before joining): both workers
        # must be in the group before the controller looks for a worker of each model.
        worker=WorkerConfig(models=models, worker_id=worker_id, idle_exit_s=0.5,
                            max_wait_ms=1.0, decode_threads=2, sysinfo_interval_s=0),
        controller=ControllerConfig(idle_exit_s=0.3, watchdog_s=None,
                                    progress_interval_s=0.0))


@pytest.fixture
def clients() -> MemoryKafkaClients:
    broker = MemoryBroker()
    broker.create_topics(topic_specs(make_config()))
    return MemoryKafkaClients(broker)


@pytest.fixture(scope="module")
def lite0() -> LoadedModel:
    return load_model(LITE0)


def write_photos(folder: Path) -> list[str]:
    paths = []
    for name, image in (("chelsea", photos.chelsea()), ("coffee", photos.coffee())):
        buffer = io.BytesIO()
        Image.fromarray(np.asarray(image)).save(buffer, "PNG")
        path = folder / f"{name}.png"
        path.write_bytes(buffer.getvalue())
        paths.append(str(path))
    return paths


def run_pool(clients: MemoryKafkaClients, workers: Sequence[tuple[str, LoadedModel]]) -> None:
    """The workers on one event loop in a thread, the controller here, until all are idle."""
    pool = [new_worker(make_config(worker_id, (model.name,)), model, codec=CODEC,
                       clients=clients)
            for worker_id, model in workers]

    async def serve() -> None:
        await asyncio.gather(*(worker.run() for worker in pool))

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="workers")
    thread.start()
    try:
        Controller(make_config(), codec=CODEC, clients=clients).run()
    finally:
        thread.join(30)


def test_a_mixed_pool_gives_every_item_the_label_of_its_jobs_model(
        clients: MemoryKafkaClients, lite0: LoadedModel, tmp_path: Path) -> None:
    client = Client(make_config(), CODEC, clients)
    real = client.submit(LITE0, write_photos(tmp_path), chunk_size=1)
    simulated = client.submit("sim:ms=1", [f"item-{i}" for i in range(6)], chunk_size=1)
    run_pool(clients, [("sim-1", load_model("sim:ms=0")), ("lite-1", lite0)])

    labels = {Path(line["item"]).stem: line["top_k"][0]["label"] for line in real.results()}
    assert labels == {"chelsea": "tiger cat", "coffee": "espresso"}
    assert {line["worker"] for line in real.results()} == {"lite-1"}
    assert {line["worker"] for line in simulated.results()} == {"sim-1"}
    assert all(line["status"] == "ok" for line in simulated.results())
    results = [read_result(CODEC, v) for v in clients.broker.values("t.results")]
    declined = [r for r in results if "served_models" in r]
    answered = [r for r in results if "served_models" not in r]
    assert declined, "with tasks on both partitions, some reached a worker of the other model"
    assert all(r["model"] == LITE0 for r in answered if r["job_id"] == real.job_id)


def test_items_fail_with_the_reason_when_no_live_worker_serves_the_model(
        clients: MemoryKafkaClients, tmp_path: Path) -> None:
    job = Client(make_config(), CODEC, clients).submit(LITE0, write_photos(tmp_path),
                                                       chunk_size=1)
    run_pool(clients, [("sim-1", load_model("sim:ms=0")), ("sim-2", load_model("sim:ms=0"))])

    status = job.wait(timeout_s=5)
    assert (status.ok_items, status.error_items) == (0, 2)
    for line in job.results():
        assert line["status"] == "error"
        assert "no live worker of pool 'default' serves model 'efficientnet_lite0'" in (
            line["error"] or "")
        assert "sim-1 serves sim:ms=0" in (line["error"] or "")


def test_a_worker_loads_another_model_on_demand_and_unloads_the_idle_one(
        clients: MemoryKafkaClients, lite0: LoadedModel, tmp_path: Path) -> None:
    """With load_on_demand a sim worker also answers an efficientnet_lite0 job; with
    max_loaded_models=1 the idle sim model is unloaded to make room."""
    loaded: list[str] = []

    def loader(name: str) -> LoadedModel:
        loaded.append(name)
        return lite0 if name == LITE0 else load_model(name)

    job = Client(make_config(), CODEC, clients).submit(LITE0, write_photos(tmp_path),
                                                       chunk_size=1)
    config = make_config("flex-1")
    config = dataclasses.replace(config, worker=dataclasses.replace(
        config.worker, load_on_demand=True, max_loaded_models=1))
    worker = new_worker(config, load_model("sim:ms=0"), codec=CODEC, clients=clients,
                        loader=loader)
    thread = threading.Thread(target=asyncio.run, args=(worker.run(),), name="worker")
    thread.start()
    try:
        Controller(make_config(), codec=CODEC, clients=clients).run()
    finally:
        thread.join(30)

    labels = {Path(line["item"]).stem: line["top_k"][0]["label"] for line in job.results()}
    assert labels == {"chelsea": "tiger cat", "coffee": "espresso"}
    assert loaded == [LITE0]
    assert worker.served.names == [LITE0]
