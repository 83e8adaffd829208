"""Loading a model on demand (`ServedModels`), in memory: every task submitted ends."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from inferstream.config import WorkerConfig
from inferstream.models import LoadedModel, ModelError, load_model
from inferstream.schemas.records import ItemStatus
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.pipeline import TaskRun
from inferstream.serving.served import RETRY_LOAD_S, ServedModels


def task(task_id: int, model: str) -> Any:
    return {"job_id": "j", "task_id": task_id, "attempt": 1, "pool": "default",
            "model": model, "top_k": 1, "issued_at": 0, "deadline_ms": None, "model_version": None,
            "items": [{"index": 0, "name": "a", "data": None}]}


def test_a_model_that_fails_to_load_with_any_error_refuses_its_tasks() -> None:
    """A load on demand that raises what is not a ModelError (CUDA out of memory as the
    model's weights are moved to the device) refuses the task with the reason, as a
    ModelError does: the task's worker declines it, the controller issues it elsewhere. It
    left the run unanswered, and with it every later task of its partition uncommitted."""
    loads: list[str] = []

    def loader(name: str) -> LoadedModel:
        loads.append(name)
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    async def scenario() -> list[TaskRun]:
        served = ServedModels(WorkerConfig(load_on_demand=True), [load_model("sim:ms=0")],
                              WorkerHooks(), loader)
        done: list[TaskRun] = []
        served.start()
        try:
            served.submit(TaskRun(task(0, "resnet50"), on_done=done.append))
            served.submit(TaskRun(task(1, "resnet50"), on_done=done.append))
            for _ in range(200):
                if len(done) == 2:
                    break
                await asyncio.sleep(0.01)
            assert served.refusal("resnet50") is not None  # the next one declined at once
        finally:
            served.close()
        return done

    done = asyncio.run(scenario())
    assert sorted(run.task["task_id"] for run in done) == [0, 1]
    assert all("CUDA out of memory" in (run.refusal or "") for run in done)
    assert loads == ["resnet50"]  # the two waited for the same load


def test_a_model_that_failed_to_load_is_tried_again_after_a_while() -> None:
    """A failed load on demand is remembered `RETRY_LOAD_S` (its tasks declined at once
    meanwhile), then a task of the model tries the load again: a failure that passed (the
    memory another model held) no longer has the worker decline the model until restarted."""
    loads: list[str] = []
    now = [1000.0]

    def loader(name: str) -> LoadedModel:
        loads.append(name)
        if len(loads) == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return load_model("sim:ms=0")

    async def scenario() -> list[TaskRun]:
        served = ServedModels(WorkerConfig(load_on_demand=True), [load_model("sim:ms=1")],
                              WorkerHooks(), loader, clock=lambda: now[0])
        done: list[TaskRun] = []
        served.start()
        try:
            with contextlib.suppress(ModelError):
                await served.load("resnet50")
            assert "CUDA out of memory" in (served.refusal("resnet50") or "")
            now[0] += RETRY_LOAD_S - 1
            assert served.refusal("resnet50") is not None
            now[0] += 1
            assert served.refusal("resnet50") is None
            served.submit(TaskRun(task(2, "resnet50"), on_done=done.append))
            for _ in range(200):
                if done:
                    break
                await asyncio.sleep(0.01)
        finally:
            served.close()
        return done

    done = asyncio.run(scenario())
    assert len(loads) == 2
    assert [run.refusal for run in done] == [None]
    assert done[0].outcomes[0] is not None and done[0].outcomes[0]["status"] == ItemStatus.OK


def test_a_refused_task_whose_answer_raises_breaks_the_worker() -> None:
    """A task refused for its model's failed load is answered from the load's own task (its
    decline rendered there): where that raised, the exception was lost with the task, which
    was never answered, and its partition's commits held for good. It breaks the worker, as
    a batch loop that raises does (`broken`: the worker stops in words)."""

    def loader(name: str) -> LoadedModel:
        raise ModelError(f"no weights for {name}")

    def answer(run: TaskRun) -> None:
        raise ValueError("surrogates not allowed")

    async def scenario() -> str | None:
        served = ServedModels(WorkerConfig(load_on_demand=True), [load_model("sim:ms=0")],
                              WorkerHooks(), loader)
        served.start()
        try:
            served.submit(TaskRun(task(0, "resnet50"), on_done=answer))
            for _ in range(200):
                if served.broken is not None:
                    break
                await asyncio.sleep(0.01)
        finally:
            served.close()
        return served.broken

    broken = asyncio.run(scenario())
    assert broken is not None and broken.startswith("load of resnet50 ended: ValueError")
