"""The check runs a model on batches of the sizes a worker makes (1, 2 and more items), so that
a model that breaks at some of them never serves: a `.squeeze()` that breaks an item alone, a
batch size traced in as a constant, a model that refuses larger batches. A model that takes
one item at a time serves with `[serving] max_batch = 1`, and a program exported for batches
up to a max is served in batches no larger."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import pytest
import torch

from inferstream.config import WorkerConfig
from inferstream.models import DEFAULT_MAX_PIXELS
from inferstream.models.repository import RepositoryError, open_repository
from inferstream.models.repository.check import load_checked
from inferstream.models.repository.model import RepositoryModel
from inferstream.serving.loader import model_settings
from tests.unit.models.repository.conftest import FEATURES, TENSOR_CARD, MakeRepository
from tests.unit.models.repository.test_repository_checks import ItemOfTheBatch, scripted

CLASSIFIER = TENSOR_CARD + "[output]\nkind = \"classification\"\n"


class Squeezed(torch.nn.Module):
    """A classifier whose `.squeeze()` takes the batch dimension of an item alone."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(FEATURES, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).squeeze()


class Flattened(torch.nn.Module):
    """A batch size turned into a Python int: a trace keeps the example's as a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(FEATURES, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.reshape(int(x.shape[0]), -1))


class AtMostFour(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 4:
            raise ValueError("at most 4 items")
        return x[:, :3]


def traced(module: torch.nn.Module, batch: int) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings():  # TorchScript is deprecated; the trace warns of the int
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(module.eval(), torch.rand(batch, FEATURES)), out)
    return out.getvalue()


def exported_up_to(most: int) -> bytes:
    program = torch.export.export(torch.nn.Linear(FEATURES, 3).eval(),
                                  (torch.rand(2, FEATURES),),
                                  dynamic_shapes=({0: torch.export.Dim("batch", max=most)},))
    out = io.BytesIO()
    torch.export.save(program, out)
    return out.getvalue()


def load(root: Path) -> RepositoryModel:
    return load_checked(open_repository(str(root)), "m", "cpu", allow_python=False,
                        max_pixels=DEFAULT_MAX_PIXELS)


@pytest.mark.parametrize(("file", "content", "reason"), [
    ("model.pt", lambda: scripted(Squeezed()), "output output has shape [3], not one row per item "
     "of a batch of 1"),
    ("model.pt", lambda: traced(Flattened(), 2), "fails on a synthetic batch of 1: "
     "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x3 and 6x3)"),
    ("model.pt", lambda: scripted(AtMostFour()), "fails on a synthetic batch of 8: "
     "ValueError: at most 4 items; a batch of 2 passes: where the model takes no more, set "
     "[serving] max_batch = 2 in its card"),
], ids=["squeeze", "traced batch size", "refuses larger batches"])
def test_a_model_failing_at_one_batch_size_is_one_line_naming_it(
        make_repository: MakeRepository, file: str, content: object, reason: str) -> None:
    assert callable(content)
    root = make_repository("m", CLASSIFIER, {f"1/{file}": content()})
    with pytest.raises(RepositoryError) as refused:
        load(root)
    assert str(refused.value) == f"{root}/m/1/{file}: {reason}"


def test_a_model_of_one_item_at_a_time_serves_with_max_batch_1(
        make_repository: MakeRepository) -> None:
    card = CLASSIFIER + "[serving]\nmax_batch = 1\n"
    root = make_repository("m", card, {"1/model.pt": scripted(ItemOfTheBatch())})
    model = load(root)
    assert model_settings(WorkerConfig(max_batch=32), model).max_batch == 1
    item = model.preprocess(b"[1, 0, 0, 0, 0, 0]")
    assert model.predict_items([item], top_k=1)[0][0][:2] == (0, "class_0")  # type: ignore[index]


@pytest.mark.parametrize(("card_batch", "worker_batch", "served"),
                         [(None, 32, 4), (16, 32, 4), (None, 3, 3), (2, 32, 2)])
def test_a_program_exported_up_to_a_batch_is_served_in_batches_no_larger(
        make_repository: MakeRepository, card_batch: int | None, worker_batch: int,
        served: int) -> None:
    serving = f"[serving]\nmax_batch = {card_batch}\n" if card_batch else ""
    root = make_repository("m", CLASSIFIER + serving, {"1/model.pt2": exported_up_to(4)})
    model = load(root)  # the check runs batches of 1, 2 and 4 (or 2), not 8
    assert model.program_max_batch == 4
    assert model_settings(WorkerConfig(max_batch=worker_batch), model).max_batch == served
    items = [model.preprocess(b"[1, 2, 3, 4, 5, 6]")] * served
    assert len(model.predict_items(items, top_k=1)) == served
