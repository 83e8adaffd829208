"""A task whose job is cancelled while the worker runs it (it was taken in before the cancel
came): the worker commits it with no result, as it would a task of the job taken in after, so
that a cancelled job's output is what its counts say."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

from inferstream.models import LoadedModel
from inferstream.models.names import parse_sim_name
from inferstream.models.outputs import ItemOutput
from inferstream.models.sim import SimModel
from inferstream.schemas.records import TaskControl, TaskControlReason, now_ms
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.records import JOB_ID, all_committed, put_tasks, results
from tests.unit.support.running import Running


class HeldModel(SimModel):
    """The sim model, whose forward passes wait until the test lets them go."""

    def __init__(self) -> None:
        super().__init__(MODEL, parse_sim_name(MODEL))
        self.entered = threading.Event()
        self.go = threading.Event()

    def predict(self, batch: torch.Tensor, top_k: int) -> Sequence[ItemOutput]:
        self.entered.set()
        self.go.wait(10)
        return super().predict(batch, top_k)


def test_tasks_of_a_job_cancelled_while_they_ran_are_committed_with_no_result(
        broker: MemoryBroker, make_worker: Callable[..., Worker], running: Running) -> None:
    config = make_config(worker={"sysinfo_interval_s": 0})  # no calibration pass
    put_tasks(broker, config, 3, items=2)
    model: LoadedModel = HeldModel()
    worker = make_worker(config, model)
    running.workers(worker)
    running.wait_for(model.entered.is_set)  # the tasks taken in: one of them in a pass

    control = TaskControl(job_id=JOB_ID, task_id=-1, attempt=0,
                          reason=TaskControlReason.CANCELLED, at=now_ms())
    broker.produce(config.topic("task-control"), 0, JOB_ID.encode(),
                   CODEC.encode("TaskControl", control))
    controls = worker.source.controls  # type: ignore[attr-defined]
    running.wait_for(lambda: controls.job_ended(JOB_ID) is not None)
    model.go.set()
    running.until(all_committed(broker, config))

    assert results(broker, config) == []
    assert controls.job_ended(JOB_ID) == f"job {JOB_ID} cancelled"
