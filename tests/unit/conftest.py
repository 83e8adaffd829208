"""Factory fixtures of the unit tests: the in-memory broker and its clients, workers,
controllers and job books built on them, what runs until the test's outcome, and the one
copy of a real model that tests only read.

    def test_each_task_once(broker, make_worker, running):
        put_tasks(broker, make_config(), 12)
        running.workers(make_worker())
        running.until(lambda: len(broker.values("t.results")) == 12)

Plain helpers (the config, records to put on topics, a stand-in worker pool) live in
`tests/unit/support/`.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from inferstream.config import Config
from inferstream.garbage import tune_collector
from inferstream.kafka import follower, settings
from inferstream.kafka.errors import KafkaSetupError
from inferstream.models.threads import available_cores
from inferstream.policy.view import NO_POLICY, PolicyView
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from tests.unit.support.memory import CODEC, POOL, make_config, new_broker
from tests.unit.support.tls import Certificates, make_certificates

if TYPE_CHECKING:
    from inferstream.controller.book import JobBook
    from inferstream.controller.hooks import ControllerHooks
    from inferstream.controller.replica import Controller
    from inferstream.models import LoadedModel
    from inferstream.serving.hooks import WorkerHooks
    from inferstream.serving.loader import ModelLoader
    from inferstream.serving.loop import Worker
    from tests.unit.support.pool import Responder
    from tests.unit.support.running import Running

# What imports torch (the worker, the controller, the models) is imported in the fixtures
# that use it, not here: pytest-xdist's controller loads this file before it starts its
# processes, and torch's import held every run of the unit tests up by 2.5 s.


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collecting imported (torch, every test module) lives as long as the process:
    moved out of the collector's reach, so that the full collections the tests set off, and
    pytest's at the end, do not scan it again each time."""
    gc.freeze()


@pytest.fixture
def broker() -> MemoryBroker:
    """An in-memory broker holding the topics of `make_config()`."""
    return new_broker()


@pytest.fixture
def clients(broker: MemoryBroker) -> MemoryKafkaClients:
    return MemoryKafkaClients(broker)


@pytest.fixture(autouse=True)
def quick_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The roles' polls and the topic followers' rounds last 10 ms instead of 200, so that
    a stop is seen at once (a poll cannot be interrupted); a failed commit is tried again
    after 10 ms instead of 400."""
    from inferstream.serving.committers import base as committers

    monkeypatch.setattr(settings, "POLL_TIMEOUT_S", 0.01)
    monkeypatch.setattr(follower, "FOLLOW_ROUND_S", 0.01)
    monkeypatch.setattr(committers, "RETRY_BACKOFF_S", 0.005)


@pytest.fixture(autouse=True, scope="session")
def command_gc_thresholds() -> None:
    """Every test runs with the garbage collector's thresholds that the `inferstream` command
    sets (`inferstream.garbage`), not with those of whichever test called `cli.main` first."""
    tune_collector()


@pytest.fixture(autouse=True)
def torch_threads_per_xdist_worker() -> None:
    """Under pytest-xdist, torch's intra-op threads of each worker process are its share of
    the cores, not every core: two workers on two cores would run four threads that spin
    waiting for each other (the models' tests took twice as long). Threads that set their own
    count (a pipeline's, `models.threads.thread_initializer`) keep it."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, available_cores() // workers))


@pytest.fixture
def running(broker: MemoryBroker) -> Iterator[Running]:
    """What the test runs on `broker`, stopped when the test ends."""
    from tests.unit.support.running import Running

    runs = Running(broker)
    yield runs
    runs.stop()


@pytest.fixture
def make_worker(clients: MemoryKafkaClients) -> Callable[..., Worker]:
    """Builds a worker of a pool on `clients`: `make_worker(config=None, models=None,
    hooks=None, loader=None)`; `models` default to those `config` names, loaded."""
    from inferstream.models import load_model
    from inferstream.worker import new_worker

    def make(config: Config | None = None, models: LoadedModel | Sequence[LoadedModel] = (),
             *, hooks: WorkerHooks | None = None, loader: ModelLoader | None = None
             ) -> Worker:
        config = config or make_config()
        served = models or [load_model(name) for name in config.worker.models]
        return new_worker(config, served, hooks=hooks, codec=CODEC, clients=clients,
                          loader=loader)
    return make


@pytest.fixture
def make_controller(clients: MemoryKafkaClients) -> Callable[..., Controller]:
    """Builds a controller replica on `clients`: `make_controller(config=None,
    policy=NO_POLICY, hooks=None)`."""
    from inferstream.controller.replica import Controller

    def make(config: Config | None = None, policy: PolicyView = NO_POLICY,
             hooks: ControllerHooks | None = None) -> Controller:
        return Controller(config or make_config(), codec=CODEC, clients=clients, policy=policy,
                          hooks=hooks)
    return make


@pytest.fixture
def make_responder(clients: MemoryKafkaClients) -> Iterator[Callable[..., Responder]]:
    """Starts a stand-in for the pool's workers on `clients`: `make_responder(config=None,
    copies=1, pause_after=None, error=None)` (see `Responder`); stopped when the test ends."""
    from tests.unit.support.pool import Responder

    started: list[Responder] = []

    def make(config: Config | None = None, **options: Any) -> Responder:
        responder = Responder(clients, config or make_config(), **options)
        started.append(responder)
        responder.start()
        return responder
    yield make
    for responder in started:
        responder.stop()


@pytest.fixture
def make_book() -> Callable[..., JobBook]:
    """Builds a job book with no Kafka: `make_book(config, policy=NO_POLICY, pool=POOL)`; the
    pool's group is `pool`, its task topic has `config.task_partitions` partitions, another
    pool's does not exist."""
    from inferstream.controller.book import JobBook

    def make(config: Config, policy: PolicyView = NO_POLICY,
             pool: Mapping[str, list[int]] = POOL) -> JobBook:
        def partitions(topic: str) -> int:
            if topic == config.task_topic():
                return config.task_partitions_for()
            if topic.startswith(config.topic("tasks.")):
                raise KafkaSetupError(f"topic {topic} does not exist")
            return config.partitions

        return JobBook(config, codec=CODEC, policy=policy, describe=lambda _group: dict(pool),
                       partitions=partitions)
    return make


@pytest.fixture(scope="session")
def lite0() -> LoadedModel:
    """efficientnet_lite0 with its real weights, loaded once: for tests that only run it."""
    from inferstream.models import load_model

    return load_model("efficientnet_lite0")


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A CA, a server certificate it signed for 127.0.0.1 and localhost, and a CA that signed
    nothing here, made once by openssl: for the tests of the HTTP surfaces."""
    return make_certificates(tmp_path_factory.mktemp("tls"))
