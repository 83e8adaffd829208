"""A worker serving several versions of a repository model (issue 27.2 and 27.3): the newest K
at start, a task answered by the version it names or declined, new version folders loaded
beside the served ones while it runs, one outside the policy retired (still answering the
tasks that name it until none has come for a while), one whose folder is gone unloaded once
idle, a version that fails left out in one line. Models stand in for the repository's (no
torch): a simulated model named and numbered as the version it loads."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from inferstream.config import WorkerConfig
from inferstream.models import LoadedModel, get_model_spec
from inferstream.models.repository import RepositoryError, read_card
from inferstream.models.sim import SimModel
from inferstream.schemas.records import (
    Job,
    TaskItem,
    WorkerAnnouncement,
    WorkerState,
    new_task,
    read_record,
    read_result,
    split_ref,
)
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loader import served_ref
from inferstream.serving.loop import Worker
from inferstream.serving.served import ServedModels
from inferstream.serving.versions import start_models
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.worker.announce import StartAnnouncer
from tests.unit.support.memory import CODEC, MODEL, make_config, new_broker
from tests.unit.support.running import Running

FACES = "faces"


def repository(root: Path, *versions: int, card: str = "") -> Path:
    """A repository whose model FACES has `versions` (their model files stand-ins)."""
    folder = root / "repo" / FACES
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.toml").write_text(card, encoding="utf-8")
    for number in versions:
        add_version(root / "repo", number)
    return root / "repo"


def add_version(repo: Path, number: int, content: bytes = b"weights") -> None:
    (repo / FACES / str(number)).mkdir(exist_ok=True)
    (repo / FACES / str(number) / "model.pt").write_bytes(content)


class StubLoader:
    """Loads `NAME:VERSION` as a simulated model of that name and version; the versions in
    `failing` fail as a model whose check fails does."""

    def __init__(self, *failing: int) -> None:
        self.failing = set(failing)
        self.loads: list[str] = []

    def __call__(self, reference: str) -> LoadedModel:
        self.loads.append(reference)
        name, version = split_ref(reference)
        if version in self.failing:
            raise RepositoryError(Path(f"repo/{name}/{version}/model.pt"),
                                  "fails on a synthetic batch of 2: RuntimeError: boom")
        spec = get_model_spec(MODEL if version is not None else name)
        assert spec.sim is not None
        model = SimModel(MODEL, spec.sim)
        if version is not None:
            model.name, model.version = name, str(version)
        return model


class Versions(WorkerHooks):
    """What a worker said of the versions it serves, in order."""

    def __init__(self) -> None:
        self.said: list[dict[str, list[int]]] = []

    def after_versions_changed(self, versions: dict[str, list[int]]) -> None:
        self.said.append(versions)


def settings_of(repo: Path, **worker: object) -> WorkerConfig:
    return make_config(worker={"models": (FACES, MODEL), "model_repository": str(repo),
                               **worker}).worker


def test_a_worker_starts_with_the_newest_versions_of_its_policy(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repository(tmp_path, 1, 2, 3)
    loaded = start_models(settings_of(repo), StubLoader())
    assert [served_ref(m) for m in loaded] == ["faces:3", "faces:2", MODEL]
    assert [served_ref(m) for m in start_models(settings_of(repo, model_versions=3),
                                                StubLoader())][:3] == [
        "faces:3", "faces:2", "faces:1"]
    (repo / FACES / "model.toml").write_text("[versions]\nlatest = 1\n", encoding="utf-8")
    assert [served_ref(m) for m in start_models(settings_of(repo, model_versions=3),
                                                StubLoader())] == ["faces:3", MODEL]

    (repo / FACES / "model.toml").write_text("", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        loaded = start_models(settings_of(repo), StubLoader(2))
    assert [served_ref(m) for m in loaded] == ["faces:3", MODEL]  # an older one may fail
    assert "version 2 of model faces not served: repo/faces/2/model.pt: fails on a synthetic " \
           "batch of 2" in caplog.text
    with pytest.raises(RepositoryError):  # the newest may not
        start_models(settings_of(repo), StubLoader(3))


def test_a_card_sets_its_own_version_policy(tmp_path: Path) -> None:
    card = tmp_path / "model.toml"
    card.write_text("[versions]\nlatest = 3\n", encoding="utf-8")
    assert read_card(card).versions.latest == 3
    card.write_text("[versions]\nlatest = 0\n", encoding="utf-8")
    with pytest.raises(RepositoryError, match=r"versions\.latest must be a positive integer"):
        read_card(card)
    card.write_text("[versions]\nnewest = 2\n", encoding="utf-8")
    with pytest.raises(RepositoryError, match=r"unknown key versions\.newest"):
        read_card(card)


def put_task(broker: MemoryBroker, task_id: int, version: int | None) -> None:
    config = make_config()
    job = Job(job_id="j", model=FACES, model_version=None, pool="default", top_k=1,
              chunk_size=1, inputs=[], inline_items=[], submitted_at=0, submitter="test",
              output_path=None, priority=0, weight=1.0)
    item = TaskItem(index=task_id, name=f"item-{task_id}", data=b"x")
    broker.produce(config.task_topic(), task_id % config.partitions, b"j",
                   CODEC.encode("Task", new_task(job, task_id, [item], model_version=version)))


def test_a_task_is_answered_by_the_version_it_names_or_declined(
        tmp_path: Path, broker: MemoryBroker, running: Running,
        make_worker: Callable[..., Worker]) -> None:
    repo = repository(tmp_path, 1, 2)
    config = make_config(worker={"models": (FACES,), "model_repository": str(repo)})
    loader = StubLoader()
    for task_id, version in enumerate((1, 2, None, 3)):
        put_task(broker, task_id, version)
    running.workers(make_worker(config, start_models(config.worker, loader), loader=loader))
    running.until(lambda: len(broker.values("t.results")) == 4)
    answers = [read_result(CODEC, v) for v in broker.values("t.results")]
    results = [a for a in answers if not isinstance(a.get("served_models"), list)]
    assert {r["task_id"]: r.get("model_version") for r in results} == {0: "1", 1: "2", 2: "2"}
    (declined,) = [a for a in answers if isinstance(a.get("served_models"), list)]
    assert declined["task_id"] == 3
    assert declined.get("served_models") == ["faces:1", "faces:2"]
    assert str(declined.get("reason")).endswith("serves faces:1, faces:2, not faces:3")


async def _served(settings: WorkerConfig, loader: StubLoader,
                  hooks: WorkerHooks) -> ServedModels:
    served = ServedModels(settings, start_models(settings, loader), hooks, loader)
    served.start()
    return served


def test_a_version_outside_the_policy_answers_the_tasks_that_name_it_until_quiet(
        tmp_path: Path) -> None:
    repo = repository(tmp_path, 1, card="[versions]\nlatest = 1\n")
    hooks = Versions()
    now = [1000.0]

    async def scenario() -> None:
        settings, loader = settings_of(repo, repository_poll_s=0), StubLoader()
        served = ServedModels(settings, start_models(settings, loader), hooks, loader,
                              clock=lambda: now[0])
        served.start()
        try:
            assert served.watch is not None and served.versions() == {FACES: [1]}
            add_version(repo, 2)
            await served.watch.look()
            # a job on version 1 keeps it; a new one (no version named) gets the newest
            assert served.versions() == {FACES: [1, 2]}
            assert served.refusal("faces:1") is None
            assert served.find("faces:1") is served.pipelines["faces:1"]
            assert served.find(FACES) is served.pipelines["faces:2"]
            now[0] += 59
            served.find("faces:1")  # a task of it came: quiet from now on
            now[0] += 59
            served.unload_idle()
            assert "faces:1" in served.pipelines
            now[0] += 1
            served.pipelines["faces:1"].items_in_flight = 1  # quiet, but a task under way
            served.unload_idle()
            assert "faces:1" in served.pipelines
            served.pipelines["faces:1"].items_in_flight = 0
            served.unload_idle()
            assert "faces:1" not in served.pipelines and not served.retiring
            assert served.refusal("faces:1") == "serves faces:2, sim:ms=0, not faces:1"
        finally:
            served.close()

    asyncio.run(scenario())
    assert hooks.said == [{FACES: [1]}, {FACES: [1, 2]}, {FACES: [2]}]


def test_a_version_whose_folder_is_gone_takes_no_new_task_and_is_unloaded_once_idle(
        tmp_path: Path) -> None:
    repo = repository(tmp_path, 1, 2, 3)
    hooks = Versions()

    async def scenario() -> None:
        served = await _served(settings_of(repo, repository_poll_s=0), StubLoader(), hooks)
        try:
            assert served.watch is not None and served.versions() == {FACES: [2, 3]}
            served.pipelines["faces:3"].items_in_flight = 1  # a task of it is under way
            shutil.rmtree(repo / FACES / "3")
            await served.watch.look()
            # 3 is gone: out of service at once; 1 comes back into the policy
            assert served.versions() == {FACES: [1, 2]}
            assert served.find("faces:3") is None and served.find(FACES) is not None
            assert served.refusal("faces:3") == "serves faces:1, faces:2, sim:ms=0, not faces:3"
            served.unload_idle()
            assert "faces:3" in served.pipelines  # still in flight
            served.pipelines["faces:3"].items_in_flight = 0
            served.unload_idle()
            assert "faces:3" not in served.pipelines and not served.retiring
        finally:
            served.close()

    asyncio.run(scenario())
    assert hooks.said == [{FACES: [2, 3]}, {FACES: [1, 2, 3]}, {FACES: [1, 2]}]


def test_a_running_job_keeps_its_version_when_a_newer_one_appears_beyond_the_policy(
        tmp_path: Path, broker: MemoryBroker, running: Running,
        make_worker: Callable[..., Worker]) -> None:
    repo = repository(tmp_path, 1, card="[versions]\nlatest = 1\n")
    config = make_config(worker={"models": (FACES,), "model_repository": str(repo),
                                 "repository_poll_s": 0.05})
    loader, hooks = StubLoader(), Versions()
    put_task(broker, 0, 1)
    running.workers(make_worker(config, start_models(config.worker, loader), loader=loader,
                                hooks=hooks))
    running.wait_for(lambda: len(broker.values("t.results")) == 1)
    add_version(repo, 2)  # published while the job on version 1 runs
    running.wait_for(lambda: {FACES: [1, 2]} in hooks.said)
    put_task(broker, 1, 1)  # the job's next task
    put_task(broker, 2, None)
    running.until(lambda: len(broker.values("t.results")) == 3)
    answers = [read_result(CODEC, v) for v in broker.values("t.results")]
    assert [a.get("reason") for a in answers if isinstance(a.get("served_models"), list)] == []
    assert {a["task_id"]: a.get("model_version") for a in answers} == {0: "1", 1: "1", 2: "2"}


def test_a_version_that_fails_is_left_out_in_one_line_and_tried_again_once_changed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repository(tmp_path, 1)
    loader = StubLoader(2)

    async def scenario() -> None:
        served = await _served(settings_of(repo, repository_poll_s=0), loader, WorkerHooks())
        assert served.watch is not None
        try:
            add_version(repo, 2)
            with caplog.at_level(logging.INFO):
                await served.watch.look()
                await served.watch.look()  # the same files: not tried again
            assert served.versions() == {FACES: [1]}
            assert loader.loads.count("faces:2") == 1
            assert caplog.text.count("version 2 of model faces not served") == 1
            add_version(repo, 2, b"weights, copied in full")
            await served.watch.look()
            assert loader.loads.count("faces:2") == 2
            loader.failing.clear()
            served.look_again()  # SIGHUP: tried again whatever its files
            await asyncio.sleep(0.1)
            assert served.versions() == {FACES: [1, 2]}
        finally:
            served.close()

    asyncio.run(scenario())


def test_the_watch_finds_a_new_version_every_poll(tmp_path: Path) -> None:
    repo = repository(tmp_path, 1)

    async def scenario() -> None:
        served = await _served(settings_of(repo, repository_poll_s=0.05), StubLoader(),
                               WorkerHooks())
        try:
            add_version(repo, 2)
            for _ in range(100):
                if served.versions() == {FACES: [1, 2]}:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError(f"not found: {served.versions()}")
        finally:
            served.close()

    asyncio.run(scenario())


def test_a_model_folder_that_cannot_be_read_keeps_its_versions_served(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repository(tmp_path, 1, 2)

    async def scenario() -> None:
        served = await _served(settings_of(repo, repository_poll_s=0), StubLoader(),
                               WorkerHooks())
        assert served.watch is not None
        try:
            (repo / FACES / "3").mkdir()  # being copied in: no model file yet
            with caplog.at_level(logging.WARNING):
                await served.watch.look()
                await served.watch.look()
            assert served.versions() == {FACES: [1, 2]}
            assert caplog.text.count("model faces: its served versions are kept") == 1
        finally:
            served.close()

    asyncio.run(scenario())


def test_a_joined_worker_announces_its_versions_again_when_they_change() -> None:
    config = make_config(worker={"models": (FACES,), "announce_interval_s": 0.05})
    broker = new_broker(config)
    announcer = StartAnnouncer(config, ["w-0"], MemoryKafkaClients(broker), CODEC)
    hooks = announcer.hooks("w-0")
    announcer.start()
    try:
        hooks.after_versions_changed({FACES: [1]})
        hooks.after_rebalance()
        hooks.after_versions_changed({FACES: [1, 2]})
    finally:
        announcer.stop()
    said = [read_record(CODEC, v, WorkerAnnouncement) for v in broker.values("t.workers")]
    serving = [a["model_versions"] for a in said if a["state"] == WorkerState.SERVING]
    assert serving[-1] == {FACES: [1, 2]}
    assert said[0]["state"] == WorkerState.STARTING

