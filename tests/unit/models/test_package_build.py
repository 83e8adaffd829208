"""What the compiled forward pass is exported from (`package_build.exported`): the batch
dimension up to the worker's max_batch, the example's rows. Compiling the package takes
20 s and more on a CPU: tests/integration/test_forward_compile.py does that."""

from __future__ import annotations

import torch
from torch.export import Dim, export

from inferstream.models.package_build import exported


class BatchOfOne(torch.nn.Module):
    """Takes batches of 1 alone (its `squeeze(0)` is a no-op on larger ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.squeeze(0)).unsqueeze(0)


def test_a_users_export_bounded_by_dim_max_is_exported_again_for_its_batches() -> None:
    """A `Dim(max=4)` export re-exported with an unbounded batch violated its constraint:
    the compiled forward pass of such a model could not be built."""
    linear = torch.nn.Linear(4, 3).eval()
    users = export(linear, (torch.zeros(2, 4),),
                   dynamic_shapes=({0: Dim("b", min=1, max=4)},)).module()
    program = exported(users, torch.zeros(4, 4))
    for rows in (1, 3, 4):
        batch = torch.rand(rows, 4)
        assert torch.allclose(program.module()(batch), linear(batch))


def test_a_model_of_batches_of_one_is_exported_for_a_batch_of_one() -> None:
    model = BatchOfOne().eval()
    program = exported(model, torch.zeros(1, 4))
    batch = torch.rand(1, 4)
    assert program.module()(batch).shape == (1, 3)
    assert torch.allclose(program.module()(batch), model(batch))
