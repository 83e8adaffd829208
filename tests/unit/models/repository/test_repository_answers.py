"""What a repository model answers from its raw output: only the outputs its card names need
one row per item, so a model that also returns its batch's loss (a scalar) is served by
naming the rest; unnamed, a scalar is an error that says to name them."""

from __future__ import annotations

import pytest
import torch

from inferstream.models.outputs import Tensors
from inferstream.models.repository.answers import OutputMismatchError, OutputReader
from inferstream.models.repository.card import OutputSpec


def raw(batch: int) -> dict[str, torch.Tensor]:
    return {"logits": torch.tensor([[2.0, 1.0, 0.0]] * batch), "loss": torch.tensor(0.25),
            "box": torch.arange(batch * 2, dtype=torch.int32).reshape(batch, 2)}


@pytest.mark.parametrize("kind", ["classification", "tensor"])
def test_outputs_the_card_leaves_out_may_be_batch_scalars(kind: str) -> None:
    spec = OutputSpec(kind=kind, tensor=("logits",) if kind == "classification" else ("box",))
    answers = OutputReader(spec, ("a", "b", "c")).read(raw(2), 2, top_k=1)
    assert len(answers) == 2
    if kind == "classification":
        assert [top[0][1] for top in answers] == ["a", "a"]  # type: ignore[index]
    else:
        assert all(isinstance(a, Tensors) and [t.name for t in a.tensors] == ["box"]
                   for a in answers)


def test_an_unnamed_scalar_output_says_to_name_the_outputs() -> None:
    with pytest.raises(OutputMismatchError, match=r"output loss has shape \[\], not one row "
                       r"per item of a batch of 2 \(name the outputs to answer with"):
        OutputReader(OutputSpec(kind="tensor"), ()).read(raw(2), 2, top_k=1)
