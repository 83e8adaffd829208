"""Loading a model on demand (`ServedModels`), in memory: every task submitted ends."""

from __future__ import annotations

import asyncio
from typing import Any

from inferstream.config import WorkerConfig
from inferstream.models import LoadedModel, load_model
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.pipeline import TaskRun
from inferstream.serving.served import ServedModels


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
