"""One item that makes the model raise fails alone, not every item batched with it: the
worker runs a failed batch's items again in smaller batches (`serving.isolation`), in jobs
and in streams alike (both go through `BatchingPipeline`)."""

from __future__ import annotations

import asyncio
import io
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from inferstream.jobs.output import output_lines, write_lines
from inferstream.models import DEFAULT_MAX_PIXELS
from inferstream.models.errors import REASON_CHARS, error_line
from inferstream.models.repository import open_repository
from inferstream.models.repository.check import load_checked
from inferstream.models.sim import SimParams
from inferstream.schemas.records import error_item
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.isolation import HOPELESS_AFTER, isolate
from tests.unit.serving.test_batching_pipeline import PickyModel, run_tasks, task


class Raiser(torch.nn.Module):
    """The tester's model: raises where an item's feature 0 is over 100."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x[:, 0] > 100).any()):
            raise ValueError("feature 0 out of range")
        return self.fc(x)


def scripted_raiser() -> torch.jit.ScriptModule:
    with warnings.catch_warnings():  # TorchScript is deprecated upstream
        warnings.simplefilter("ignore", FutureWarning)
        return torch.jit.script(Raiser().eval())


class Counted:
    """A forward pass over ints that raises where the batch holds one of `bad` (or always),
    counting its passes."""

    def __init__(self, bad: set[int], *, always: bool = False) -> None:
        self.bad, self.always, self.passes = bad, always, 0

    def __call__(self, items: Sequence[int]) -> list[int]:
        self.passes += 1
        poisoned = [item for item in items if item in self.bad]
        if self.always or poisoned:
            raise ValueError(f"item {poisoned[0] if poisoned else items[0]} is bad")
        return [item * 10 for item in items]


def test_only_the_items_that_fail_alone_fail_in_about_log_n_passes_each() -> None:
    forward = Counted({5, 40})
    got = isolate(forward, list(range(64)), ValueError("item 5 is bad"))
    assert got == [f"inference failed: ValueError: item {n} is bad" if n in (5, 40) else n * 10
                   for n in range(64)]
    assert forward.passes <= 2 * 2 * 6  # 2 bad items, log2(64) = 6 levels, two halves each


def test_a_model_that_fails_every_input_gives_the_rest_up_after_a_few_items() -> None:
    forward = Counted(set(), always=True)
    got = isolate(forward, list(range(64)), ValueError("broken"))
    alone = [f"inference failed: ValueError: item {n} is bad" for n in range(HOPELESS_AFTER)]
    assert got == alone + ["inference failed: ValueError: broken"] * (64 - HOPELESS_AFTER)
    # the first 8 items tried alone and the halves down to them: 15 + 2 (and the batch's
    # own pass: 18), not 127
    assert forward.passes == 2 * HOPELESS_AFTER - 1 + 2
    # a passing item before them keeps the recovery going: every item is tried alone
    forward = Counted(set(range(1, 64)))
    got = isolate(forward, list(range(64)), ValueError("item 1 is bad"))
    assert got[0] == 0 and all(isinstance(output, str) for output in got[1:])


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried ..."),
                                   RuntimeError("CUDA error: device-side assert triggered")])
def test_out_of_memory_and_device_errors_are_not_split(error: Exception) -> None:
    forward = Counted(set())
    got = isolate(forward, list(range(8)), error)
    assert forward.passes == 0 and len(set(got)) == 1 and "\n" not in got[0]


def test_an_error_is_one_line_its_exception_and_message() -> None:
    batch = torch.zeros(2, 6)
    batch[1, 0] = 1000
    with pytest.raises(torch.jit.Error) as raised:
        scripted_raiser()(batch)
    assert str(raised.value).count("\n") > 5  # TorchScript's traceback, then the exception
    assert error_line(raised.value) == "ValueError: feature 0 out of range"
    assert error_line(RuntimeError("\n  first line\nsecond")) == "RuntimeError: first line"
    assert error_line(KeyError()) == "KeyError"
    assert len(error_line(RuntimeError("x" * 1000))) == REASON_CHARS


def test_an_error_item_keeps_its_reason_in_one_line() -> None:
    item = {"index": 0, "name": "a", "data": None}
    reason = error_item(item, "no weights; searched:\n  /a\n  /b\r\n")["error"]  # type: ignore[arg-type]
    assert reason == "no weights; searched: | /a | /b"
    assert error_item(item, "not an image")["error"] == "not an image"  # type: ignore[arg-type]


class PoisonedModel(PickyModel):
    """A sim model whose forward pass raises on a batch holding the item named poison."""

    def predict(self, batch: torch.Tensor, top_k: int) -> list[Any]:
        if bool((batch[:, 0] == self.preprocess(b"poison")[0]).any()):
            raise RuntimeError("The model's code failed.\nTraceback (most recent call last):\n"
                               "  File model.py, line 3\nbuiltins.ValueError: poisoned")
        return super().predict(batch, top_k)


def test_a_poisoned_item_fails_alone_in_a_job_and_its_csv_stays_one_line_an_item() -> None:
    names = [f"ok{n}" for n in range(5)] + ["poison"] + [f"ok{n}" for n in range(5, 10)]
    done = asyncio.run(run_tasks(PoisonedModel("sim:ms=0", SimParams(ms=0)),
                                 [task(0, names[:6]), task(1, names[6:])], WorkerHooks(),
                                 max_batch=16))
    outcomes = [o for run in sorted(done, key=lambda r: r.task["task_id"]) for o in run.outcomes]
    assert [o["status"] for o in outcomes] == ["OK"] * 5 + ["ERROR"] + ["OK"] * 5  # type: ignore[index]
    assert outcomes[5]["error"] == "inference failed: ValueError: poisoned"  # type: ignore[index]
    result = {"job_id": "j", "task_id": 0, "attempt": 1, "worker": "w", "model": "m",
              "model_version": None, "items": done[0].outcomes}
    csv = io.StringIO()
    write_lines(output_lines([result]), csv, "csv")
    assert len(csv.getvalue().splitlines()) == 1 + len(done[0].outcomes)


def test_a_torchscript_models_bad_input_fails_alone_through_the_pipeline(
        tmp_path: Path) -> None:
    """The tester's case: 10 good .npy items and one with feature 0 at 1000."""
    (tmp_path / "raisets" / "1").mkdir(parents=True)
    (tmp_path / "raisets" / "model.toml").write_text('[input]\nkind = "tensor"\nshape = [6]\n')
    scripted_raiser().save(str(tmp_path / "raisets" / "1" / "model.pt"))
    model = load_checked(open_repository(str(tmp_path)), "raisets", "cpu", allow_python=False,
                         max_pixels=DEFAULT_MAX_PIXELS)
    items = [np.full(6, n, np.float32) for n in range(10)] + [np.array([1000, 0, 0, 0, 0, 0],
                                                                       np.float32)]
    spec = task(0, [f"{n}.npy" for n in range(11)], top_k=1)
    for item, array in zip(spec["items"], items, strict=True):
        buffer = io.BytesIO()
        np.save(buffer, array)
        item["data"] = buffer.getvalue()
    run, = asyncio.run(run_tasks(model, [spec], WorkerHooks(), max_batch=16))
    assert [o["status"] for o in run.outcomes] == ["OK"] * 10 + ["ERROR"]  # type: ignore[index]
    assert run.outcomes[10]["error"] == "inference failed: ValueError: feature 0 out of range"  # type: ignore[index]


def test_a_models_failing_batches_log_one_traceback_then_one_line_each(
        caplog: pytest.LogCaptureFixture) -> None:
    """Every batch holding a poisoned item fails; the first logs its traceback, the others a
    line each naming the error (a traceback per batch buried the log)."""
    names = [["ok1", "poison", "ok2"], ["ok3", "poison", "ok4"], ["poison", "ok5"]]
    model = PoisonedModel("sim:ms=0", SimParams(ms=0))
    with caplog.at_level(logging.WARNING, logger="inferstream.serving"):
        done = asyncio.run(run_tasks(model, [task(n, items) for n, items in enumerate(names)],
                                     WorkerHooks(), max_batch=3))
    assert sum(o["status"] == "ERROR" for run in done for o in run.outcomes) == 3  # type: ignore[index]
    failed = [r for r in caplog.records if r.getMessage().startswith("inference failed for")]
    assert len(failed) >= 2
    assert [r.exc_info is not None for r in failed] == [True] + [False] * (len(failed) - 1)
    assert failed[1].getMessage().endswith("items: ValueError: poisoned (its traceback is "
                                           "logged at the first RuntimeError)")
