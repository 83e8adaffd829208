"""A small image classifier for the tests of the forward pass: it compiles in seconds."""

from __future__ import annotations

import pytest
import torch

from inferstream.models import Prediction, TorchModel, imagenet_labels


def tiny_model() -> TorchModel:
    """A small image classifier that compiles in seconds (random weights: any labels)."""
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 1000))
    torch.manual_seed(0)
    for parameter in module.parameters():
        torch.nn.init.normal_(parameter)
    return TorchModel("tiny", module, lambda data: torch.zeros(3, 64, 64), torch.device("cpu"),
                      imagenet_labels(), input_shape=(3, 64, 64))


def batch_of(model: TorchModel, size: int) -> torch.Tensor:
    torch.manual_seed(size)
    return torch.rand(size, *model.input_shape)


def assert_same_predictions(got: list[Prediction], want: list[Prediction]) -> None:
    """The same classes in the same order, scores equal up to float rounding (channels-last
    and compiled kernels sum in another order)."""
    assert [[c for c, _, _ in row] for row in got] == [[c for c, _, _ in row] for row in want]
    for row_got, row_want in zip(got, want, strict=True):
        assert [s for _, _, s in row_got] == pytest.approx([s for _, _, s in row_want],
                                                           rel=1e-3, abs=1e-5)
