"""What a repository model answers per item, from its raw output and the card's [output]:
`classification` (softmax top-k with the model's labels), `embedding` (a float vector per
item, L2-normalised where the card says) or `tensor` (every output, or the ones named).

A model's output is a tensor, a tuple (or list) of tensors, named `output_0`, `output_1`, ...
by position, or a dict of tensors, named by key; a single tensor is named `output`. Each has
one row per item. Half-precision floats (float16, bfloat16) are answered as float32, so that an
output does not change with the device's precision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from inferstream.models.base import check_top_k
from inferstream.models.errors import ModelError
from inferstream.models.outputs import Embedding, ItemOutput, NamedTensor, Prediction, Tensors
from inferstream.models.repository.card import OutputChoice, OutputSpec


class OutputMismatchError(ModelError):
    """The model's output does not fit the kind its card declares."""


def named_outputs(raw: object, batch_size: int,
                  choices: tuple[OutputChoice, ...] = ()) -> list[tuple[str, torch.Tensor]]:
    """The model's outputs by name that `choices` names (every one where none: `chosen`),
    each checked to hold one row per item. The others may be anything a tensor can be (a
    model that also returns its batch's loss, a scalar, is served by naming the rest)."""
    if isinstance(raw, torch.Tensor):
        outputs = [("output", raw)]
    elif isinstance(raw, Mapping):
        outputs = [(str(key), value) for key, value in raw.items()]
    elif isinstance(raw, Sequence):
        outputs = [(f"output_{i}", value) for i, value in enumerate(raw)]
    else:
        raise OutputMismatchError(f"the model returned a {type(raw).__name__}, not a tensor, "
                                  "a tuple or a dict of tensors")
    for name, value in outputs:
        if not isinstance(value, torch.Tensor):
            raise OutputMismatchError(f"output {name} is a {type(value).__name__}, not a "
                                      "tensor")
    if not outputs:
        raise OutputMismatchError("the model returned no output")
    found = chosen(outputs, choices)
    for name, value in found:
        if value.dim() == 0 or value.shape[0] != batch_size:
            named = " (name the outputs to answer with in the card's output.tensor)" \
                if len(outputs) > 1 and not choices else ""
            raise OutputMismatchError(f"output {name} has shape {list(value.shape)}, not one "
                                      f"row per item of a batch of {batch_size}{named}")
    return found


def chosen(outputs: list[tuple[str, torch.Tensor]],
           choices: tuple[OutputChoice, ...]) -> list[tuple[str, torch.Tensor]]:
    """The outputs `choices` names (names or indexes), in that order; every one where none."""
    if not choices:
        return outputs
    found = []
    names = [name for name, _ in outputs]
    for choice in choices:
        if isinstance(choice, int) and choice < len(outputs):
            found.append(outputs[choice])
        elif isinstance(choice, str) and choice in names:
            found.append(outputs[names.index(choice)])
        else:
            raise OutputMismatchError(f"output.tensor {choice!r} is not among the model's "
                                      f"outputs ({', '.join(names)})")
    return found


class OutputReader:
    """Turns a batch's raw output into one `ItemOutput` per item, by the card's [output]."""

    def __init__(self, spec: OutputSpec, labels: tuple[str, ...], *,
                 numbered: bool = False) -> None:
        self.spec = spec
        self.labels = labels
        #: the labels are class_0, class_1, ... for the classes the check saw: the model has
        #: no labels file
        self.numbered = numbered

    def read(self, raw: object, batch_size: int, top_k: int) -> list[ItemOutput]:
        outputs = named_outputs(raw, batch_size, self.spec.tensor)
        if self.spec.kind == "tensor":
            return self.tensors(outputs, batch_size)
        if len(outputs) > 1:
            raise OutputMismatchError(
                f"the model returns {len(outputs)} outputs ({', '.join(n for n, _ in outputs)})"
                "; name the one to use with output.tensor")
        name, values = outputs[0]
        if values.dim() != 2:
            width = "classes" if self.spec.kind == "classification" else "dim"
            article = "an" if self.spec.kind == "embedding" else "a"
            raise OutputMismatchError(f"output {name} of {article} {self.spec.kind} model has "
                                      f"shape {list(values.shape)}; expected [batch, {width}]")
        if self.spec.kind == "embedding":
            return self.embeddings(values)
        return self.classes(values, top_k)

    def classes(self, logits: torch.Tensor, top_k: int) -> list[ItemOutput]:
        if logits.shape[1] != len(self.labels):
            count = len(self.labels)
            held = (f"; it output {count} at its check, which named them class_0 to "
                    f"class_{count - 1} (it has no labels file)") if self.numbered else \
                f" and its labels file holds {count} labels"
            raise OutputMismatchError(f"the model outputs {logits.shape[1]} classes{held}")
        k = check_top_k(top_k, len(self.labels))
        scores = logits.float()
        if self.spec.softmax:
            scores = torch.softmax(scores, dim=1)
        values, ids = scores.topk(k, dim=1)
        rows: list[ItemOutput] = []
        for id_row, value_row in zip(ids.cpu().tolist(), values.cpu().tolist(), strict=True):
            prediction: Prediction = [(c, self.labels[c], s)
                                      for c, s in zip(id_row, value_row, strict=True)]
            rows.append(prediction)
        return rows

    def embeddings(self, values: torch.Tensor) -> list[ItemOutput]:
        vectors = values.float()
        if self.spec.normalize:
            vectors = torch.nn.functional.normalize(vectors, p=2.0, dim=1)
        return [Embedding(tuple(row)) for row in vectors.cpu().tolist()]

    def tensors(self, outputs: list[tuple[str, torch.Tensor]],
                batch_size: int) -> list[ItemOutput]:
        arrays = []
        for name, values in outputs:
            if values.dtype in (torch.float16, torch.bfloat16):
                values = values.float()
            array = values.detach().cpu().contiguous().numpy()
            arrays.append((name, array.astype(array.dtype.newbyteorder("<"), copy=False)))
        return [Tensors(tuple(NamedTensor(name, array.dtype.name, tuple(array.shape[1:]),
                                          array[i].tobytes())
                              for name, array in arrays))
                for i in range(batch_size)]


def class_labels(count: int) -> tuple[str, ...]:
    """`class_0` ... for a classifier without a labels file."""
    return tuple(f"class_{i}" for i in range(count))
