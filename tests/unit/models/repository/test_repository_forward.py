"""A repository model served through the worker's forward pass (its precision and memory
format) answers as it does in its own dtype, contiguous, where its `models check` passed: a
model's tensor constants follow its weights, a model that cannot take a channels-last batch
serves contiguous ones, and one that still fails in the worker's precision is refused at load
in one line, never served failing every item."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from inferstream.config import WorkerConfig
from inferstream.models.forward import ForwardReport
from inferstream.models.outputs import Tensors
from inferstream.models.repository import RepositoryError
from inferstream.models.repository.model import RepositoryModel
from inferstream.serving.loader import model_loader, model_settings
from tests.unit.models.repository.conftest import (
    CNN_CARD,
    FEATURES,
    SIZE,
    TENSOR_CARD,
    MakeRepository,
    export,
    script,
)

TENSOR_OUTPUT_CARD = TENSOR_CARD + "[output]\nkind = \"tensor\"\n"


class Projection(torch.nn.Module):
    """A projection kept as a plain tensor attribute, neither a parameter nor a buffer: a
    constant of its torch.export program, and of its TorchScript trace."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.layer = torch.nn.Linear(FEATURES, 4)
        self.projection = torch.rand(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x) @ self.projection


class Flattens(torch.nn.Module):
    """A convolution whose output is flattened with `.view`, as LeNet's: a channels-last batch
    fails it (`view size is not compatible with input tensor's size and stride`)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.conv = torch.nn.Conv2d(3, 4, 3, stride=2)
        self.head = torch.nn.Linear(4 * 15 * 15, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        return self.head(y.view(y.size(0), -1))


def served(root: Path, name: str, **settings: str) -> RepositoryModel:
    config = WorkerConfig(model_repository=f"file://{root}", compile="off", **settings)
    model = model_loader(config, "cpu")(name)
    assert isinstance(model, RepositoryModel)
    return model


def npy(array: np.ndarray) -> bytes:
    from io import BytesIO

    out = BytesIO()
    np.save(out, array)
    return out.getvalue()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_an_exported_models_tensor_constants_follow_its_precision_and_device(
        make_repository: MakeRepository, precision: str) -> None:
    """The constant stayed float32 beside half-precision weights: every item failed with
    `expected m1 and m2 to have the same dtype`, after a check that passed."""
    module = Projection().eval()
    root = make_repository("projection", TENSOR_OUTPUT_CARD,
                           {"1/model.pt2": export(module, torch.rand(2, FEATURES))})
    model = served(root, "projection", precision=precision)
    rows = np.random.default_rng(3).random((3, FEATURES)).astype(np.float32)
    answers = model.predict_items([model.preprocess(npy(row)) for row in rows], top_k=1)
    with torch.no_grad():
        direct = module(torch.from_numpy(rows))
    for answer, expected in zip(answers, direct, strict=True):
        assert isinstance(answer, Tensors)
        values = np.frombuffer(answer.tensors[0].data, answer.tensors[0].dtype)
        assert values == pytest.approx(expected.tolist(), abs=0.05)
    model.module.to("meta")  # a device: the constant goes with the weights
    assert {t.device.type for t in model.module.buffers()} == {"meta"}


@pytest.mark.parametrize("file", ["model.pt2", "model.pt"])
def test_a_model_that_fails_a_channels_last_batch_serves_contiguous_ones(
        make_repository: MakeRepository, file: str) -> None:
    """Its check ran contiguous batches and passed; then the worker's channels-last (on by
    default) failed every item with `view size is not compatible`."""
    module = Flattens().eval()
    example = torch.rand(2, 3, SIZE, SIZE)
    saved = export(module, example) if file == "model.pt2" else script(module, example)
    root = make_repository("flattens", CNN_CARD, {f"1/{file}": saved})
    model = served(root, "flattens", channels_last="on")
    assert model_settings(WorkerConfig(channels_last="on"), model).channels_last == "off"
    assert model.memory_format == torch.contiguous_format
    assert model.contiguous_only is not None and "view size" in model.contiguous_only
    item = model.synthetic_item()
    answer = model.predict_items([item], top_k=3)[0]
    with torch.no_grad():
        probabilities = torch.softmax(module(item[None]), 1)[0]
    assert isinstance(answer, list)
    assert {c: s for c, _, s in answer} == pytest.approx(dict(enumerate(probabilities.tolist())),
                                                         abs=1e-5)


def test_a_model_that_fails_in_the_workers_precision_is_refused_at_load(
        make_repository: MakeRepository) -> None:
    """A TorchScript trace keeps the constant in its graph, where no `.to()` reaches it: the
    model fails in bf16. It was served, and every item failed."""
    module = Projection().eval()
    root = make_repository("projection", TENSOR_OUTPUT_CARD,
                           {"1/model.pt": script(module, torch.rand(2, FEATURES))})
    assert served(root, "projection", precision="fp32").dtype == torch.float32
    with pytest.raises(RepositoryError) as refused:
        served(root, "projection", precision="bf16")
    line = str(refused.value)
    assert line.startswith(f"{root}/projection/1/model.pt: in bf16, the precision it would "
                           "serve in: fails on a synthetic batch of 1: RuntimeError: ")
    assert line.endswith('set [serving] precision = "fp32" in its card')
    assert "\n" not in line


def test_a_program_exported_for_a_batch_of_1_is_refused_saying_how_to_export_it(
        make_repository: MakeRepository) -> None:
    """The line said to export with a batch Dim, which torch.export refuses for the example
    batch of 1 the file was exported with (`your code specialized it to be a constant (1)`)."""
    module = Projection().eval()
    root = make_repository("projection", TENSOR_OUTPUT_CARD, {
        "1/model.pt2": export(module, torch.rand(1, FEATURES), dynamic=False)})
    with pytest.raises(RepositoryError) as refused:
        served(root, "projection")
    assert str(refused.value) == (
        f"{root}/projection/1/model.pt2: its batch dimension is fixed at 1: export it with "
        "dynamic_shapes=({0: torch.export.Dim('batch')},) and an example batch of 2 items or "
        "more (torch.export fixes a batch of 1)")


def test_a_model_compiled_for_the_workers_max_batch_is_checked_within_it(
        make_repository: MakeRepository, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled forward pass takes batches up to the worker's max_batch, which its package
    was built for (`package_build`: a batch Dim of max `max_batch`, a batch of 1 alone for
    1). The check of the prepared forward ran batches of up to 8 whatever the worker's
    max_batch: with --max-batch 1 and the package compiled at load (compile_background off,
    or read from the cache at a restart) a model it served fine was refused, as the real
    package answered a batch of 2 with one row (`output has shape [1, 2], not one row per
    item of a batch of 2`). The compiled forward pass here refuses a larger batch."""
    def compiled_for(model: RepositoryModel, max_batch: int, **_: object) -> ForwardReport:
        eager = model.forward

        def forward(batch: torch.Tensor) -> torch.Tensor:
            if len(batch) > max_batch:  # beyond what its package was built for
                raise RuntimeError(f"batch of {len(batch)}: the package takes {max_batch}")
            return eager(batch)
        model.forward = forward
        return ForwardReport(model.name, "fp32", False, True, "compiled")

    monkeypatch.setattr("inferstream.serving.loader.prepare_forward", compiled_for)
    root = make_repository("projection", TENSOR_OUTPUT_CARD,
                           {"1/model.pt2": export(Projection().eval(), torch.rand(2, FEATURES))})
    for max_batch in (4, 1):
        config = WorkerConfig(model_repository=f"file://{root}", max_batch=max_batch)
        model = model_loader(config, "cpu")("projection")
        assert len(model.predict_items([model.synthetic_item()] * max_batch, top_k=1)) \
            == max_batch
