"""A pool of workers serving different models, in memory: every item gets the label of its
job's model; a task whose model no live worker serves fails with the reason (issue 9.1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from inferstream.client import Client
from inferstream.config import Config
from inferstream.controller.replica import Controller
from inferstream.models import LoadedModel, load_model
from inferstream.schemas.records import read_result
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.memory import CODEC, make_config
from tests.unit.support.photos import write_photos
from tests.unit.support.records import settled
from tests.unit.support.running import Running

LITE0 = "efficientnet_lite0"
MakeWorker = Callable[..., Worker]


def worker_config(worker_id: str, models: tuple[str, ...] = ("sim:ms=0",)) -> Config:
    # No sysinfo (so no calibration and no first sample before joining): both workers
    # must be in the group before the controller looks for a worker of each model.
    return make_config(worker={"models": models, "worker_id": worker_id,
                               "sysinfo_interval_s": 0})


def run_pool(running: Running, make_worker: MakeWorker,
             make_controller: Callable[..., Controller],
             workers: list[tuple[str, LoadedModel]], jobs: int = 1,
             controller: Config | None = None) -> None:
    """The workers and a controller, until every job is COMPLETED and every answer read."""
    running.workers(*(make_worker(worker_config(worker_id, (model.name,)), model)
                      for worker_id, model in workers))
    running.controller(make_controller(controller))
    running.until(settled(running.broker, make_config(), jobs=jobs))


def test_a_mixed_pool_gives_every_item_the_label_of_its_jobs_model(
        clients: MemoryKafkaClients, lite0: LoadedModel, tmp_path: Path, running: Running,
        make_worker: MakeWorker, make_controller: Callable[..., Controller]) -> None:
    client = Client(make_config(), CODEC, clients)
    real = client.submit(LITE0, write_photos(tmp_path), chunk_size=1)
    simulated = client.submit("sim:ms=1", [f"item-{i}" for i in range(6)], chunk_size=1)
    run_pool(running, make_worker, make_controller,
             [("sim-1", load_model("sim:ms=0")), ("lite-1", lite0)], jobs=2)

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
        clients: MemoryKafkaClients, tmp_path: Path, running: Running,
        make_worker: MakeWorker, make_controller: Callable[..., Controller]) -> None:
    job = Client(make_config(), CODEC, clients).submit(LITE0, write_photos(tmp_path),
                                                       chunk_size=1)
    run_pool(running, make_worker, make_controller,
             [("sim-1", load_model("sim:ms=0")), ("sim-2", load_model("sim:ms=0"))],
             controller=make_config(controller={"model_wait_s": 0}))  # no wait for a worker

    status = job.wait(timeout_s=5)
    assert (status.ok_items, status.error_items) == (0, 2)
    for line in job.results():
        assert line["status"] == "error"
        assert "no live worker of pool 'default' serves model 'efficientnet_lite0'" in (
            line["error"] or "")
        assert "sim-1 serves sim:ms=0" in (line["error"] or "")


def test_a_worker_loads_another_model_on_demand_and_unloads_the_idle_one(
        clients: MemoryKafkaClients, lite0: LoadedModel, tmp_path: Path, running: Running,
        make_worker: MakeWorker, make_controller: Callable[..., Controller]) -> None:
    """With load_on_demand a sim worker also answers an efficientnet_lite0 job; with
    max_loaded_models=1 the idle sim model is unloaded to make room."""
    loaded: list[str] = []

    def loader(name: str) -> LoadedModel:
        loaded.append(name)
        return lite0 if name == LITE0 else load_model(name)

    job = Client(make_config(), CODEC, clients).submit(LITE0, write_photos(tmp_path),
                                                       chunk_size=1)
    config = make_config(worker={"worker_id": "flex-1", "sysinfo_interval_s": 0,
                                 "load_on_demand": True, "max_loaded_models": 1})
    worker = make_worker(config, load_model("sim:ms=0"), loader=loader)
    running.workers(worker)
    running.controller(make_controller())
    running.until(settled(clients.broker, config))

    labels = {Path(line["item"]).stem: line["top_k"][0]["label"] for line in job.results()}
    assert labels == {"chelsea": "tiger cat", "coffee": "espresso"}
    assert loaded == [LITE0]
    assert worker.served.names == [LITE0]
